package storage

import (
	"errors"
	"io/fs"
	"path"
	"sync"

	"github.com/vdl-project/vdl/vfs"
)

// Space keeps a data dir's space reserve, so that a full disk never stops
// every replica at once with nothing left to free space with.
//
//   - A ballast file of Reserve bytes sits in the data dir. When a segment
//     roll, an index file or a meta file (the retention point) cannot be
//     written for lack of space, the log gives the ballast up and tries
//     again: the roll and the retention commands that free space are
//     always written.
//   - Check (called periodically) reports the disk short of space (low)
//     while the ballast is gone or the free space is below Reserve: the
//     server then refuses new user data (leaders answer
//     KAFKA_STORAGE_ERROR), and goes on serving reads and applying
//     retention. Once free space is back (retention, an operator), Check
//     recreates the ballast and the server resumes by itself.
//
// A write that still finds the disk full (another program filled it past
// the reserve) fail-stops the server as any failed write does.
type Space struct {
	fs      vfs.FS
	dir     string
	reserve int64
	// OnChange, if set, is told when the disk becomes short of space or
	// has space again, as soon as a roll notices it (the periodic Check
	// notices too). Called from the writer: it must not block.
	OnChange func(low bool)

	mu      sync.Mutex
	ballast bool
	low     bool
}

// BallastName is the reserve's file in a data dir (tools outside the
// server, such as the campaigns' disk-full fault, look for it).
const BallastName = "reserve.ballast"

// RoomToWrite is the free space a data dir whose reserve is reserve bytes
// needs for its server to take produces: the reserve beside the ballast
// file, or twice the reserve once a write gave the ballast up (Check
// recreates it first, then needs the reserve beside it).
func RoomToWrite(reserve int64, ballast bool) uint64 {
	if ballast {
		return uint64(reserve)
	}
	return 2 * uint64(reserve)
}

// NewSpace returns the reserve of dir (reserve bytes; 0 disables it).
func NewSpace(fsys vfs.FS, dir string, reserve int64) *Space {
	s := &Space{fs: fsys, dir: dir, reserve: reserve}
	if _, err := fsys.Stat(path.Join(dir, BallastName)); err == nil {
		s.ballast = true
	}
	return s
}

// Low reports whether the last Check found the disk short of space.
func (s *Space) Low() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.low
}

// Check recreates the ballast when the space allows it (twice Reserve
// free) and reports whether the disk is short of space.
func (s *Space) Check() (low bool) {
	if s == nil || s.reserve <= 0 {
		return false
	}
	free, err := s.fs.FreeSpace(s.dir)
	if err != nil {
		return false // cannot tell: a write will
	}
	s.mu.Lock()
	if !s.ballast && free >= RoomToWrite(s.reserve, false) {
		if err := s.create(); err == nil {
			s.ballast = true
			free -= uint64(s.reserve)
		}
	}
	low = !s.ballast || free < RoomToWrite(s.reserve, true)
	changed := low != s.low
	s.low = low
	s.mu.Unlock()
	if changed && s.OnChange != nil {
		s.OnChange(low)
	}
	return low
}

func (s *Space) create() error {
	name := path.Join(s.dir, BallastName)
	f, err := s.fs.Create(name)
	if err != nil {
		return err
	}
	err = f.Allocate(s.reserve)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		_ = s.fs.Remove(name)
	}
	return err
}

// release gives the ballast up (a write found the disk full); false when
// there was none to give.
func (s *Space) release() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ballast {
		return false
	}
	err := s.fs.Remove(path.Join(s.dir, BallastName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	_ = s.fs.SyncDir(s.dir)
	s.ballast = false
	return true
}

// tookSpace is told that a log took disk (a new segment, a segment's
// allocation growing): the free space changed.
func (s *Space) tookSpace() {
	if s != nil {
		s.Check()
	}
}

// retryNoSpace runs f, and once more after giving up the ballast if it
// failed for lack of space.
func (l *Log) retryNoSpace(f func() error) error {
	err := f()
	if errors.Is(err, vfs.ErrNoSpace) && l.space.release() {
		l.log().Warn("disk full: the space reserve is given up to go on", "dir", l.dir)
		err = f()
	}
	return err
}
