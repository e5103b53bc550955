package campaign

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/internal/proccluster"
	"github.com/vdl-project/vdl/storage"
)

// The disk-full nemesis: each server's data dir is a 48 MiB tmpfs; the
// nemesis fills the leader's until ENOSPC, the leader refuses produces
// (KAFKA_STORAGE_ERROR) and says so, nothing acknowledged is lost, and
// once the file is gone it takes produces again without a restart. The
// mounts are gone at the end.
func TestDiskFullCampaign(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting size-limited data dirs needs root")
	}
	cmds, err := Parse(strings.NewReader(`start-cluster nodes=3 streams=1 disk=48
nemesis faults=disk-full interval=2s seed=1
workload producers=3 duration=7s
check
`))
	require.NoError(t, err)
	t.Run("run", func(t *testing.T) {
		res := RunWith(t, proccluster.Production.Path(t), "disk-full", cmds, Options{ReportDir: t.TempDir()})
		var report strings.Builder
		WriteReport(&report, "production build", []Result{res})
		require.Equal(t, "PASS", Verdict(res), "%s", report.String())
		require.Contains(t, res.Steps[0].Output, "data dirs: 48 MiB tmpfs each")
		work := res.Steps[2].Output
		require.Regexp(t, `nemesis: disk-full n\d`, work)
		require.Regexp(t, `[1-9]\d* produces refused for lack of space \(KAFKA_STORAGE_ERROR\)`, work)
		require.Regexp(t, `: [1-9]\d* acknowledged`, work)
		require.Contains(t, res.Steps[3].Output, "linearizable, no anomaly")
		require.Positive(t, res.Summary.FaultCounts["disk-full"])
	})
	require.Empty(t, Leftovers(os.Getpid()), "the tmpfs mounts go with the test")
}

// A run whose own records fill the disk is no finding of the disk-full
// fault (errRecordsFillDisk), alone or beside a finding, which stays.
func TestFindingsLeaveOutRecordsFillingTheDisk(t *testing.T) {
	stopped := errors.New("n2 stopped while its disk was full")
	full := fmt.Errorf("n2, 900 KiB free once the filler is gone: %w", errRecordsFillDisk)
	require.NoError(t, findings(full))
	require.NoError(t, findings(errors.Join(full)))
	for _, err := range []error{stopped, errors.Join(stopped), errors.Join(full, stopped), errors.Join(stopped, full)} {
		f := findings(err)
		require.ErrorIs(t, f, stopped)
		require.NotErrorIs(t, f, errRecordsFillDisk)
	}
}

// A server takes produces with its reserve free beside the reserve's
// ballast file, and needs twice the reserve once a write gave it up.
func TestRoomToRecover(t *testing.T) {
	dir := t.TempDir()
	require.EqualValues(t, 2*diskReservedBytes, roomToRecover(dir))
	require.NoError(t, os.WriteFile(filepath.Join(dir, storage.BallastName), nil, 0o644))
	require.EqualValues(t, diskReservedBytes, roomToRecover(dir))
}
