package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/configserver"
)

// Commands against the config servers (docs/configserver.md), etcdctl
// style: cluster status, stream create|delete|describe|list|alter, server
// list|drain|activate, ops. --config-servers names them; -o json prints
// JSON instead of tables.

// defaultConfigServers are the config servers of `vdl dev`.
const defaultConfigServers = "127.0.0.1:9392,127.0.0.1:9393,127.0.0.1:9394"

func init() {
	addCommand(newClusterCmd)
	addCommand(newServerCmd)
	addCommand(newOpsCmd)
	addCommand(newBalancerCmd)
	addCommand(newMoveCmd)
}

// configClient is a client of the config servers with the CLI's credentials.
func (a *app) configClient() *configserver.Client {
	var addrs []string
	for _, s := range strings.Split(a.configServers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			addrs = append(addrs, s)
		}
	}
	return configserver.NewClient(addrs, a.creds.ca != "", httpClient)
}

func ctx15() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 15*time.Second)
}

// call runs one request to the config servers and prints its answer: JSON
// with -o json, else the table.
func (a *app) call(do func(context.Context, *configserver.Client) (any, func(io.Writer), error)) error {
	ctx, cancel := ctx15()
	defer cancel()
	v, table, err := do(ctx, a.configClient())
	if err != nil {
		return err
	}
	return a.output(v, table)
}

// output prints v as JSON with -o json, else calls table.
func (a *app) output(v any, table func(w io.Writer)) error {
	switch a.format {
	case "json":
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "", "table":
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		table(tw)
		return tw.Flush()
	}
	return usageError{fmt.Errorf("-o %q: want table or json", a.format)}
}

func newClusterCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "The cluster as the config servers see it",
		Args: exactArgs(0, "a subcommand: status"), RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Servers by DC with their health, replicas and leaders; streams",
		Args:  exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				cs, err := c.Cluster(ctx)
				return cs, func(w io.Writer) {
					fmt.Fprintf(w, "config server leader: %d (%s)\nview: %s\nstreams: %d (%d being deleted)\n\n", cs.Leader, cs.LeaderAPI, cs.View, cs.Streams, cs.Deleting)
					serverTable(w, cs.Servers)
				}, err
			})
		},
	})
	return cmd
}

func serverTable(w io.Writer, servers []configserver.ServerStatus) {
	fmt.Fprintln(w, "ID\tDC\tRACK\tSTATE\tHEALTH\tLAST REPORT\tGROUPS\tLEADERS\tDISK FREE\tKAFKA")
	for _, s := range servers {
		last := "never"
		if s.LastReportMs >= 0 {
			last = (time.Duration(s.LastReportMs) * time.Millisecond).String() + " ago"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", s.ID, dash(s.DC), dash(s.Rack), s.State, s.Health, last, s.Groups, s.Leaders,
			humanBytes(s.DiskFreeBytes), s.Kafka)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func humanBytes(n int64) string {
	const gib = 1 << 30
	if n >= gib {
		return fmt.Sprintf("%.1f GiB", float64(n)/gib)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// addStreamAdminCmds adds the config servers' stream commands to the
// stream command.
func addStreamAdminCmds(a *app, cmd *cobra.Command) {
	var spec configserver.StreamSpec
	var retMs, retBytes int64
	var wait time.Duration
	create := &cobra.Command{
		Use:   "create NAME [--replication-factor 3|5] [--preferred-dc DC] [--retention-ms MS] [--retention-bytes N]",
		Short: "Create a stream (placed by the config servers)",
		Args:  exactArgs(1, "the stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Name = args[0]
			if cmd.Flags().Changed("retention-ms") {
				spec.RetentionMs = &retMs
			}
			if cmd.Flags().Changed("retention-bytes") {
				spec.RetentionBytes = &retBytes
			}
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				st, err := c.CreateStream(ctx, spec)
				if err != nil {
					return nil, nil, err
				}
				status := a.waitLed(ctx, c, configserver.StreamStatus{Stream: st}, wait)
				return status, func(w io.Writer) { streamTable(w, []configserver.StreamStatus{status}) }, nil
			})
		},
	}
	create.Flags().DurationVar(&wait, "wait", 10*time.Second, "wait this long for the stream's first leader (0: return once it is created)")
	create.Flags().IntVar(&spec.ReplicationFactor, "replication-factor", 3, "replicas: 3 or 5")
	create.Flags().StringVar(&spec.PreferredDC, "preferred-dc", "", "the DC its leader should be in")
	create.Flags().Int64Var(&retMs, "retention-ms", configserver.DefaultRetentionMs, "delete records older than this (-1: keep)")
	create.Flags().Int64Var(&retBytes, "retention-bytes", -1, "keep at most about this much (-1: no limit)")

	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a stream: its replicas stop it and remove its data",
		Args:  exactArgs(1, "the stream name"),
		RunE: func(_ *cobra.Command, args []string) error {
			ctx, cancel := ctx15()
			defer cancel()
			if err := a.configClient().DeleteStream(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "stream %s deleted\n", args[0])
			return nil
		},
	}
	describe := &cobra.Command{
		Use:   "describe NAME",
		Short: "A stream's group, replicas, leader, preferred DC and retention",
		Args:  exactArgs(1, "the stream name"),
		RunE: func(_ *cobra.Command, args []string) error {
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				st, err := c.Stream(ctx, args[0])
				return st, func(w io.Writer) { streamTable(w, []configserver.StreamStatus{st}) }, err
			})
		},
	}
	var prefix string
	var limit int
	list := &cobra.Command{
		Use:   "list [--prefix P] [--limit N]",
		Short: "Every stream (deleted ones still stopping included), by name",
		Args:  exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			if limit < 0 {
				return fmt.Errorf("--limit %d: want a count (0: every stream)", limit)
			}
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				sts, err := c.Streams(ctx)
				sts = slices.DeleteFunc(sts, func(s configserver.StreamStatus) bool { return !strings.HasPrefix(s.Name, prefix) })
				slices.SortFunc(sts, func(a, b configserver.StreamStatus) int { return strings.Compare(a.Name, b.Name) })
				total := len(sts)
				if limit > 0 && total > limit {
					sts = sts[:limit]
				}
				return sts, func(w io.Writer) {
					streamTable(w, sts)
					if total > len(sts) {
						fmt.Fprintf(w, "... and %d more (--limit 0 shows every stream, --prefix filters)\n", total-len(sts))
					}
				}, err
			})
		},
	}
	list.Flags().StringVar(&prefix, "prefix", "", "only the streams whose names start with this")
	list.Flags().IntVar(&limit, "limit", 0, "show at most this many streams (0: all; the table and the JSON alike)")
	var change configserver.StreamChange
	var dc string
	alter := &cobra.Command{
		Use:   "alter NAME [--preferred-dc DC] [--retention-ms MS] [--retention-bytes N]",
		Short: "Change a stream's retention or preferred DC",
		Args:  exactArgs(1, "the stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			if f.Changed("preferred-dc") {
				change.PreferredDC = &dc
			}
			if f.Changed("retention-ms") {
				change.RetentionMs = &retMs
			}
			if f.Changed("retention-bytes") {
				change.RetentionBytes = &retBytes
			}
			if change == (configserver.StreamChange{}) {
				return usageError{errors.New("nothing to change: give --preferred-dc, --retention-ms or --retention-bytes")}
			}
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				st, err := c.AlterStream(ctx, args[0], change)
				return st, func(w io.Writer) { streamTable(w, []configserver.StreamStatus{{Stream: st}}) }, err
			})
		},
	}
	alter.Flags().StringVar(&dc, "preferred-dc", "", "the DC its leader should be in (\"\": anywhere)")
	alter.Flags().Int64Var(&retMs, "retention-ms", 0, "delete records older than this (-1: keep)")
	alter.Flags().Int64Var(&retBytes, "retention-bytes", 0, "keep at most about this much (-1: no limit)")
	cmd.AddCommand(create, del, describe, list, alter)
}

// waitLed waits, at most d, until the config servers hear of a leader of
// the stream just created: its replicas host it then, so a Kafka client
// producing right after the command finds it (as after CreateTopics),
// instead of being told the topic is unknown until the servers learn of
// it. A stream not led in time is still created: say so, not fail.
func (a *app) waitLed(ctx context.Context, c *configserver.Client, st configserver.StreamStatus, d time.Duration) configserver.StreamStatus {
	if d <= 0 {
		return st
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		if got, err := c.Stream(ctx, st.Name); err == nil && got.Leader != 0 {
			return got
		}
		select {
		case <-ctx.Done():
			fmt.Fprintf(a.stderr, "stream %q created; no leader reported within %v (its servers may still be starting it)\n", st.Name, d)
			return st
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func streamTable(w io.Writer, sts []configserver.StreamStatus) {
	fmt.Fprintln(w, "NAME\tGROUP\tREPLICAS\tLEADER\tPREFERRED DC\tRETENTION\tSTATE")
	for _, s := range sts {
		var reps []string
		for _, r := range s.Replicas {
			reps = append(reps, strconv.FormatUint(r, 10))
		}
		leader := "-"
		if s.Leader != 0 {
			leader = strconv.FormatUint(s.Leader, 10)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Group, strings.Join(reps, ","), leader, dash(s.PreferredDC),
			retention(s.RetentionMs, s.RetentionBytes), s.State)
	}
}

func newServerCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "server", Short: "Servers as the config servers know them: list, drain, activate",
		Args: exactArgs(0, "a subcommand: list, drain, activate"), RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "Registered servers with their health",
		Args:  exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				cs, err := c.Cluster(ctx)
				return cs.Servers, func(w io.Writer) { serverTable(w, cs.Servers) }, err
			})
		},
	})
	for _, st := range []struct{ use, state, short string }{
		{"drain ID", configserver.ServerDraining, "Move every replica off the server (max_moves at a time); no new replicas go there"},
		{"activate ID", configserver.ServerActive, "Place new replicas on the server again"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   st.use,
			Short: st.short,
			Args:  exactArgs(1, "the server id"),
			RunE: func(_ *cobra.Command, args []string) error {
				id, err := strconv.ParseUint(args[0], 10, 64)
				if err != nil || id == 0 {
					return usageError{fmt.Errorf("%q is not a server id", args[0])}
				}
				ctx, cancel := ctx15()
				defer cancel()
				if err := a.configClient().SetServerState(ctx, id, st.state); err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "server %d is %s\n", id, st.state)
				return nil
			},
		})
	}
	return cmd
}

func newOpsCmd(a *app) *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "ops [-n N]",
		Short: "The config servers' history of operations, newest last",
		Args:  exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				ops, err := c.Ops(ctx, n)
				return ops, func(w io.Writer) {
					fmt.Fprintln(w, "INDEX\tAT\tKIND\tDETAIL")
					for _, op := range ops {
						fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", op.Index, time.UnixMilli(op.At).UTC().Format(time.RFC3339), op.Kind, op.Detail)
					}
				}, err
			})
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 50, "how many")
	return cmd
}

func newBalancerCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "balancer", Short: "The preferred-DC leader balancer",
		Args: exactArgs(0, "a subcommand: status"), RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Transfers pending, refused (and why) and done",
		Args:  exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				b, err := c.Balancer(ctx)
				return b, func(w io.Writer) {
					fmt.Fprintf(w, "view: %s\ntransfers: %d, failed: %d\n\n", b.View, b.Transfers, b.Failures)
					fmt.Fprintln(w, "STATE\tSTREAM\tLEADER\tTO\tSINCE/AT\tREASON")
					for _, set := range []struct {
						name  string
						items []configserver.BalancerItem
					}{{"pending", b.Pending}, {"refused", b.Refused}, {"done", b.Done}} {
						for _, it := range set.items {
							fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", set.name, it.Stream, it.Leader, it.To,
								time.UnixMilli(it.At).UTC().Format(time.RFC3339), it.Reason)
						}
					}
				}, err
			})
		},
	})
	return cmd
}

func newMoveCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "move", Short: "Replica moves: start, status, cancel",
		Args: exactArgs(0, "a subcommand: start, status, cancel"), RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
	var req configserver.MoveRequest
	start := &cobra.Command{
		Use:   "start STREAM --from ID [--to ID]",
		Short: "Move a stream's replica from one server to another (--to omitted: placement chooses)",
		Args:  exactArgs(1, "the stream name"),
		RunE: func(_ *cobra.Command, args []string) error {
			if req.From == 0 {
				return usageError{errors.New("--from ID is required")}
			}
			req.Stream = args[0]
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				m, err := c.StartMove(ctx, req)
				return m, func(w io.Writer) { moveTable(w, []configserver.MoveStatus{{Move: m}}) }, err
			})
		},
	}
	start.Flags().Uint64Var(&req.From, "from", 0, "the server giving up its replica")
	start.Flags().Uint64Var(&req.To, "to", 0, "the server taking it (0: placement chooses)")
	status := &cobra.Command{
		Use:   "status",
		Short: "Every stream's latest move: its step, or how it ended, and what it waits for",
		Args:  exactArgs(0, ""),
		RunE: func(*cobra.Command, []string) error {
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				ms, err := c.Moves(ctx)
				return ms, func(w io.Writer) { moveTable(w, ms) }, err
			})
		},
	}
	cancelCmd := &cobra.Command{
		Use:   "cancel STREAM",
		Short: "Undo a stream's move (before its old replica is removed)",
		Args:  exactArgs(1, "the stream name"),
		RunE: func(_ *cobra.Command, args []string) error {
			return a.call(func(ctx context.Context, c *configserver.Client) (any, func(io.Writer), error) {
				m, err := c.CancelMove(ctx, args[0])
				return m, func(w io.Writer) { moveTable(w, []configserver.MoveStatus{{Move: m}}) }, err
			})
		},
	}
	cmd.AddCommand(start, status, cancelCmd)
	return cmd
}

func moveTable(w io.Writer, ms []configserver.MoveStatus) {
	fmt.Fprintln(w, "STREAM\tFROM\tTO\tSTEP\tSTATE\tCANCEL\tUPDATED\tNOTE")
	for _, m := range ms {
		note := m.Waiting
		if m.State != configserver.MoveActive {
			note = m.Reason
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%v\t%s\t%s\n", m.Stream, m.From, m.To, m.Step, m.State, m.Cancel,
			time.UnixMilli(m.Updated).UTC().Format(time.RFC3339), note)
	}
}
