// Command vdlctl is VDL's admin CLI. It talks to a server's admin HTTP
// (--admin). Each command group lives in its own file and adds itself with
// addCommand from an init function.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// defaultAdmin is the server's default admin HTTP address.
const defaultAdmin = "127.0.0.1:9192" // node 1 of `vdl dev`

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command failed (server error, unknown name, ...)
	exitUsage = 2 // bad command line
)

// app is what every command shares: global flags and output streams.
type app struct {
	admin string
	// configServers are the config servers' API addresses; format is
	// the output format of their commands (table or json).
	configServers string
	format        string
	creds         credentials
	stdout        io.Writer
	stderr        io.Writer
}

var commands []func(*app) *cobra.Command

// addCommand registers a top-level command; call it from an init.
func addCommand(build func(*app) *cobra.Command) { commands = append(commands, build) }

// usageError marks errors in the command line itself.
type usageError struct{ error }

func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s takes %d argument(s): %s (got %d)", cmd.CommandPath(), n, names, len(args))}
		}
		return nil
	}
}

func newRootCmd(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:           "vdlctl",
		Short:         "VDL admin CLI",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.PersistentFlags().StringVar(&a.admin, "admin", defaultAdmin, "admin HTTP address of the server (host:port or URL)")
	root.PersistentFlags().StringVar(&a.configServers, "config-servers", envOr("VDL_CONFIG_SERVERS", defaultConfigServers),
		"config servers' API addresses, comma-separated [$VDL_CONFIG_SERVERS]")
	root.PersistentFlags().StringVarP(&a.format, "output", "o", "table", "output of the config server commands: table or json")
	a.creds.flags(root)
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		cl, err := a.creds.client()
		if err != nil {
			return usageError{err}
		}
		httpClient = cl
		if !strings.Contains(a.admin, "://") {
			a.admin = a.creds.scheme() + "://" + a.admin
		}
		return nil
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	for _, build := range commands {
		root.AddCommand(build(a))
	}
	return root
}

// run executes vdlctl with args and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := newRootCmd(a)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "vdlctl: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || (cmd == root && len(args) > 0) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitError
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
