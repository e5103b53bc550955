// Command fptest serves fptest's routes on 127.0.0.1:0 and prints
// "ADDR host:port" once listening. Exit code 3: StartupCheck failed.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/failpoints/internal/fptest"
)

func main() {
	if err := failpoints.StartupCheck(); err != nil {
		fmt.Fprintln(os.Stderr, "fptest:", err)
		os.Exit(3)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fptest:", err)
		os.Exit(1)
	}
	fmt.Printf("ADDR %s\n", ln.Addr())
	fmt.Fprintln(os.Stderr, "fptest:", http.Serve(ln, fptest.NewMux()))
	os.Exit(1)
}
