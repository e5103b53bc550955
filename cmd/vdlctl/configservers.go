package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/configserver"
)

// vdlctl configserver list|remove|add|transfer-leader: the config servers'
// own group (docs/configserver.md, replacing a config server), etcdctl's
// member list / remove / add.

func init() { addCommand(newConfigServerCmd) }

func newConfigServerCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "configserver", Short: "The config servers' own group: list, remove, add, transfer-leader",
		Args: exactArgs(0, "a subcommand: list, remove, add, transfer-leader"), RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "The config servers: role in the group (voter, learner, none), health as the leader sees it",
		Args:  exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				cs, err := c.ConfigServers(ctx)
				return cs, func(w io.Writer) {
					fmt.Fprintf(w, "leader: %d (term %d, commit %d)\n\n", cs.Leader, cs.Term, cs.Commit)
					fmt.Fprintln(w, "ID\tROLE\tLEADER\tHEALTH\tMATCH\tRAFT\tAPI\tNOTE")
					for _, m := range cs.Members {
						lead := ""
						if m.Leader {
							lead = "*"
						}
						fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Role, lead, m.Health, m.Match, m.Raft, m.API, m.Note)
					}
				}, err
			})
		},
	})
	for _, op := range []struct {
		use, short, done string
		do               func(*configserver.Client, context.Context, uint64) error
	}{
		{"remove ID", "Remove a config server from the group (one whose data dir was lost; refused if it would lose the quorum)", "removed from the config servers' group",
			(*configserver.Client).RemoveConfigServer},
		{"add ID", "Add a config server of [[peers]] back to the group: a learner, made a voter once caught up", "added as a learner (a voter once caught up: vdlctl configserver list)",
			(*configserver.Client).AddConfigServer},
		{"transfer-leader ID", "Hand the config servers' leadership to a voter", "asked to lead",
			(*configserver.Client).TransferConfigLeader},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   op.use,
			Short: op.short,
			Args:  exactArgs(1, "the config server id"),
			RunE: func(_ *cobra.Command, args []string) error {
				id, err := strconv.ParseUint(args[0], 10, 64)
				if err != nil || id == 0 {
					return usageError{fmt.Errorf("%q is not a config server id", args[0])}
				}
				ctx, cancel := ctx15()
				defer cancel()
				if err := op.do(a.configClient(), ctx, id); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "config server %d %s\n", id, op.done)
				return nil
			},
		})
	}
	return cmd
}
