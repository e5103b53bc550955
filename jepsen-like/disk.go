package campaign

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vdl-project/vdl/checker"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// Size-limited data dirs (start-cluster disk=MiB, root only): each
// server's data dir is a tmpfs of that size, mounted before the servers
// start and unmounted after they stop (also after a failure or an
// interrupt; Sweep finds a leftover by the vdlj-<pid>- element of its
// path). The servers run with 1 MiB segments and a 4 MiB space reserve so
// that a small disk holds them.
//
// The disk-full fault fills the leader's disk with a file until ENOSPC.
// The server must log that it is short of space and refuse produces
// (KAFKA_STORAGE_ERROR) without losing what it acknowledged; once the
// file is removed it must log that space is back and take produces again,
// without a restart. Either log line missing (within 5 s) is a finding,
// and so is a server that stopped. A run long enough for the stream's own
// records to fill the disk (nothing is retained away: the checks read
// everything) leaves the server rightly short of space: then the fault is
// not injected, or its undo not judged (errRecordsFillDisk).

const (
	diskSegmentBytes  = 1 << 20
	diskReservedBytes = 4 << 20
	fillerName        = "vdlj-filler"
)

// mountDisks mounts a tmpfs of mib MiB at dir/disk<id> for each id; the
// node's data dir is its data/ (the failpoint build keeps hard links of
// its files beside it, in data.powerloss/: the same filesystem).
func mountDisks(dir string, ids []uint64, mib int) ([]string, error) {
	var mounts []string
	for _, id := range ids {
		p := filepath.Join(dir, fmt.Sprintf("disk%d", id))
		if err := os.MkdirAll(p, 0o755); err != nil {
			return mounts, err
		}
		if err := syscall.Mount("tmpfs", p, "tmpfs", 0, fmt.Sprintf("size=%dm,mode=0755", mib)); err != nil {
			return mounts, fmt.Errorf("mount a %d MiB tmpfs at %s: %w", mib, p, err)
		}
		mounts = append(mounts, p)
	}
	return mounts, nil
}

func unmountDisks(mounts []string) error {
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("umount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// errRecordsFillDisk: the stream's records leave the disk less free space
// than the server needs to take produces (roomToRecover), so it is short
// of space whatever the nemesis does: no finding either way.
var errRecordsFillDisk = errors.New("the stream's records fill the disk: the server is rightly short of space (a run too long for its disk)")

// roomToRecover is the free space the server whose data dir is dataDir
// needs to take produces (storage.RoomToWrite, as its ballast file is).
func roomToRecover(dataDir string) uint64 {
	_, err := os.Stat(filepath.Join(dataDir, storage.BallastName))
	return storage.RoomToWrite(diskReservedBytes, err == nil)
}

// freeSpace is the free space of dir's file system, as the server sees it.
func freeSpace(dir string) (uint64, error) { return vfs.OS{}.FreeSpace(dir) }

// fillDisk writes a file into the node's data dir until the disk is full:
// a fault to undo (freeDisk) unless there was no room to fill.
func (r *runner) fillDisk(id uint64) error {
	if len(r.disks) == 0 {
		return fmt.Errorf("disk-full needs size-limited data dirs (start-cluster disk=MiB)")
	}
	n := r.c.Node(id)
	// Less than a server without its ballast needs: the fault could not
	// be undone, whatever the server does.
	if free, err := freeSpace(n.DataDir); err == nil && free < storage.RoomToWrite(diskReservedBytes, false) {
		return fmt.Errorf("not filled, %d KiB free: %w", free>>10, errRecordsFillDisk)
	}
	r.active = append(r.active, activeFault{"disk-full", id})
	before := strings.Count(readFile(n.LogPath), "disk short of space")
	f, err := os.Create(filepath.Join(n.DataDir, fillerName))
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				f.Close()
				return err
			}
			break
		}
	}
	// The last bytes: a page at a time.
	for _, err := f.Write(buf[:4096]); err == nil; _, err = f.Write(buf[:4096]) {
	}
	f.Close()
	r.openFault(diskKey(id), "disk-full", fmt.Sprintf("n%d", id))
	if !waitUntil(5*time.Second, func() bool { return strings.Count(readFile(n.LogPath), "disk short of space") > before }) {
		if !n.Running() {
			return fmt.Errorf("n%d stopped when its disk filled", id)
		}
		return fmt.Errorf("n%d did not say it was short of space within 5s of its disk filling", id)
	}
	return nil
}

// freeDisk removes the filler; the node must take produces again.
func (r *runner) freeDisk(id uint64) error {
	n := r.c.Node(id)
	before := strings.Count(readFile(n.LogPath), "disk space is back")
	if err := os.Remove(filepath.Join(n.DataDir, fillerName)); err != nil && !os.IsNotExist(err) {
		return err
	}
	r.closeFaults(diskKey(id))
	if !n.Running() {
		return fmt.Errorf("n%d stopped while its disk was full", id)
	}
	if !waitUntil(5*time.Second, func() bool { return strings.Count(readFile(n.LogPath), "disk space is back") > before }) {
		// Judged by the space left then: a follower catching up fills
		// what the filler gave back as fast as it can write.
		if free, err := freeSpace(n.DataDir); err == nil && free < roomToRecover(n.DataDir) {
			return fmt.Errorf("n%d, %d KiB free 5s after the filler went: %w", id, free>>10, errRecordsFillDisk)
		}
		return fmt.Errorf("n%d did not take produces again within 5s of its disk having space", id)
	}
	return nil
}

func diskKey(id uint64) string { return fmt.Sprintf("disk:%d", id) }

// findings is err without what is no finding (errRecordsFillDisk); nil if
// nothing is left.
func findings(err error) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var keep []error
	for _, e := range errs {
		if !errors.Is(e, errRecordsFillDisk) {
			keep = append(keep, e)
		}
	}
	return errors.Join(keep...)
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func waitUntil(d time.Duration, f func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if f() {
			return true
		}
	}
	return f()
}

// refusedForSpace counts the produces answered KAFKA_STORAGE_ERROR.
func refusedForSpace(ops []checker.Op) int {
	n := 0
	for _, op := range ops {
		if op.Kind == checker.KindProduce && strings.Contains(op.Err, "KAFKA_STORAGE_ERROR") {
			n++
		}
	}
	return n
}
