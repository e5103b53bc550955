// Command vdl is the VDL server binary: `vdl server` runs one server,
// `vdl dev` runs a local three-node cluster for trying VDL out.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/server"
)

func main() {
	if err := failpoints.StartupCheck(); err != nil {
		fmt.Fprintln(os.Stderr, "vdl:", err)
		os.Exit(2)
	}
	root := &cobra.Command{
		Use:           "vdl",
		Short:         "VDL: a replicated, strongly consistent log that speaks Kafka",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serverCmd(), configServerCmd(), devCmd(), certsCmd(), userCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "vdl:", err)
		if errors.Is(err, server.ErrFailStop) {
			os.Exit(server.ExitFailStop)
		}
		os.Exit(1)
	}
}
