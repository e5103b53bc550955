//go:build failpoint

package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// The failpoint build's power switch. The data dir is on vfs.Lazy, so a
// power loss — POST /debug/power-loss, or a failpoint's
// return("powerloss") — loses exactly what was never made durable, and
// the process dies. The admin command first records what the server had
// told raft was durable (raftnode.Durable) in promised.json beside the data
// dir; the restarted server checks its recovered logs against it and
// reports what it lost at GET /debug/durability (the simulator's
// durability check, on real processes).

// promised is what the server had promised when its power was last cut,
// read (and removed: it holds for this restart only) at startup.
var promised struct {
	sync.Mutex
	groups map[uint64]raftnode.Durable
	err    error
}

func dataFS(cfg Config) (vfs.FS, error) {
	l, err := vfs.NewLazy(cfg.DataDir, filepath.Clean(cfg.DataDir)+".powerloss")
	if err != nil {
		return nil, fmt.Errorf("power switch: %w", err)
	}
	failpoints.SetPowerLoss(func() { _ = l.PowerLoss() })
	b, err := os.ReadFile(promisedPath(cfg))
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	promised.Lock()
	defer promised.Unlock()
	if err == nil {
		err = json.Unmarshal(b, &promised.groups)
	}
	promised.err = errors.Join(err, os.Remove(promisedPath(cfg)))
	return l, nil
}

func promisedPath(cfg Config) string { return filepath.Clean(cfg.DataDir) + ".promised.json" }

func (s *Server) mountPowerLoss(mux *http.ServeMux) {
	mux.HandleFunc("POST /debug/power-loss", s.handlePowerLoss)
	mux.HandleFunc("GET /debug/durability", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		v := append([]string{}, s.durabilityViolations...)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"violations": v})
	})
}

// handlePowerLoss cuts the power: no file operation runs from the moment
// the switch is thrown, so what raft was told then is what must survive.
func (s *Server) handlePowerLoss(w http.ResponseWriter, _ *http.Request) {
	l, ok := s.fs.(*vfs.Lazy)
	if !ok {
		jsonError(w, http.StatusConflict, "this server's data dir has no power switch")
		return
	}
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"result":"power off"}` + "\n"))
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	var promises []byte
	err := l.PowerLossWith(func() {
		// The loop never waits for the disk, so it answers while the file
		// system is held; a stuck loop only costs the check.
		done := make(chan error, 1)
		go func() {
			d, err := s.host.Durable()
			if err == nil {
				promises, err = json.Marshal(d)
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				s.log.Error("power loss: what was reported durable is not recorded", "err", err)
			}
		case <-time.After(2 * time.Second):
			s.log.Error("power loss: the raft loop did not say what it reported durable within 2s")
		}
	})
	if err != nil {
		s.log.Error("power loss: undoing what was not durable failed", "err", err)
	}
	if promises != nil {
		if err := writeSynced(promisedPath(s.cfg), promises); err != nil {
			s.log.Error("power loss: recording what was reported durable", "err", err)
		}
	}
	failpoints.Crash()
}

// writeSynced writes b to name on the OS, durably (not through the power
// switch, which is off by now).
func writeSynced(name string, b []byte) error {
	tmp := name + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	err = errors.Join(err, f.Sync(), f.Close(), os.Rename(tmp, name))
	if err != nil {
		return err
	}
	return vfs.OS{}.SyncDir(filepath.Dir(name))
}

// checkPromised checks group's log, just opened, against what the server
// had promised when its power was cut, and reports what was lost.
func (s *Server) checkPromised(group uint64, l *storage.Log) {
	promised.Lock()
	d, ok := promised.groups[group]
	err := promised.err
	promised.Unlock()
	if err != nil {
		s.log.Error("durability check: cannot read what was promised", "err", err)
	}
	if !ok {
		return
	}
	if err := d.Check(l); err != nil {
		msg := fmt.Sprintf("group %d restarted without what it reported durable: %v", group, err)
		s.log.Error("DURABILITY VIOLATION", "group", group, "err", err)
		s.mu.Lock()
		s.durabilityViolations = append(s.durabilityViolations, msg)
		s.mu.Unlock()
	}
}
