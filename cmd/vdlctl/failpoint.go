package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/failpoints"
)

func init() { addCommand(newFailpointCmd) }

func newFailpointCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "failpoint",
		Aliases: []string{"failpoints", "fp"},
		Short:   "List, enable and disable failpoints (failpoint builds only)",
		Long: `Failpoints exist only in a failpoint build (make build-failpoint).
A term is [p%][n*]action[(value)], chained with ->; actions: off, return,
sleep, panic, print, pause. Names are short (storage/beforeSync) or full
(github.com/vdl-project/vdl/storage/beforeSync). See docs/failpoints.md.`,
		Args: exactArgs(0, "a subcommand: list, get, enable, disable"),
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	client := func() *failpoints.Client { return &failpoints.Client{BaseURL: a.admin, HTTP: httpClient} }

	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the failpoints compiled into the server, with term and hit count",
		Args:  exactArgs(0, "none"),
		RunE: func(cmd *cobra.Command, args []string) error {
			infos, err := client().List()
			if err != nil {
				return fpError(a, "list", "", err)
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				enc.SetEscapeHTML(false)
				return enc.Encode(infos)
			}
			tw := tabwriter.NewWriter(a.stdout, 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tTERM\tHITS\tPLACE")
			for _, in := range infos {
				term := in.Term
				if !in.Enabled {
					term = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", in.Name, term, in.Hits, in.Place)
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON (with effects and full names)")

	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show one failpoint",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := client().Get(args[0])
			if err != nil {
				return fpError(a, "get", args[0], err)
			}
			enc := json.NewEncoder(a.stdout)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			return enc.Encode(in)
		},
	}
	enable := &cobra.Command{
		Use:     "enable NAME TERM",
		Short:   "Enable a failpoint with a term, e.g. 'return(true)', '1*sleep(100)', 'pause'",
		Example: "  vdlctl failpoint enable storage/beforeSync 'return(true)'\n  vdlctl --admin 10.0.0.2:9090 failpoint enable raftnode/dropTo '50%return(2)'",
		Args:    exactArgs(2, "NAME TERM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := client().Enable(args[0], args[1]); err != nil {
				return fpError(a, "enable", args[0], err)
			}
			fmt.Fprintf(a.stdout, "enabled %s: %s\n", args[0], args[1])
			return nil
		},
	}
	disable := &cobra.Command{
		Use:   "disable NAME",
		Short: "Disable a failpoint (releases goroutines paused in it)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := client().Disable(args[0]); err != nil {
				return fpError(a, "disable", args[0], err)
			}
			fmt.Fprintf(a.stdout, "disabled %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(list, get, enable, disable)
	return cmd
}

// fpError turns a client error into a message naming the problem.
func fpError(a *app, op, name string, err error) error {
	what := "failpoint " + op
	if name != "" {
		what += " " + name
	}
	var apiErr *failpoints.APIError
	switch {
	case errors.Is(err, failpoints.ErrNoControlPlane):
		return fmt.Errorf("%s: the server at %s has no failpoint control plane: it is a production build (failpoints are compiled out); use a failpoint build (make build-failpoint)", what, a.admin)
	case errors.Is(err, failpoints.ErrUnknown):
		return fmt.Errorf("%s: %v; 'vdlctl failpoint list' shows the failpoints compiled into this server", what, err)
	case errors.Is(err, failpoints.ErrBadTerm):
		return fmt.Errorf("%s: %v", what, err)
	case errors.As(err, &apiErr):
		return fmt.Errorf("%s: server error: %v", what, err)
	default:
		return fmt.Errorf("%s: cannot reach the admin HTTP at %s (is the server running? see --admin): %v", what, a.admin, err)
	}
}
