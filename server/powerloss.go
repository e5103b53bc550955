//go:build !failpoint

package server

import (
	"net/http"

	"github.com/vdl-project/vdl/storage"
	"github.com/vdl-project/vdl/vfs"
)

// The production build runs on the OS file system, with no power switch
// (powerloss_failpoint.go has the failpoint build's).

func dataFS(Config) (vfs.FS, error) { return vfs.OS{}, nil }

func (s *Server) mountPowerLoss(*http.ServeMux) {}

func (s *Server) checkPromised(uint64, *storage.Log) {}
