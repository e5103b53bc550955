package server

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/vfs"
)

// listFails fails the listing of one directory with err while armed.
type listFails struct {
	vfs.FS
	dir   string
	err   error
	armed atomic.Bool
}

func (l *listFails) List(dir string) ([]string, error) {
	if l.armed.Load() && filepath.Clean(dir) == l.dir {
		return nil, l.err
	}
	return l.FS.List(dir)
}

// TestStreamListingErrorIsNotLostData: a server that cannot list a
// stream's directory at start (out of descriptors) says so, and does not
// call its data lost (a server that lost its data must be replaced: an
// operator told that would wipe a healthy data dir). Once it can list
// again it starts with its data.
func TestStreamListingErrorIsNotLostData(t *testing.T) {
	fss := []vfs.FS{vfs.OS{}, vfs.OS{}, vfs.OS{}}
	c := newTestClusterOn(t, fss, func(*Config) {})
	lf := &listFails{FS: vfs.OS{}, dir: filepath.Join(c.cfgs[0].DataDir, "streams", "1"), err: syscall.EMFILE}
	c.fss[0] = lf
	c.stop(0)

	lf.armed.Store(true)
	s, err := newServer(c.cfgs[0], slog.New(slog.NewTextHandler(io.Discard, nil)), lf)
	if s != nil {
		_ = s.Close()
	}
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrIdentity, "not lost data: %v", err)
	require.ErrorIs(t, err, syscall.EMFILE)
	require.Contains(t, err.Error(), fmt.Sprintf("listing its log %s", lf.dir))

	lf.armed.Store(false)
	c.start(0)
}
