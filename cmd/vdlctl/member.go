package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func init() { addCommand(newMemberCmd) }

// membersStatus is GET /streams/{name}/members (server.MembersStatus).
type membersStatus struct {
	Stream   string   `json:"stream"`
	Leader   uint64   `json:"leader"`
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners"`
	Commit   uint64   `json:"commit"`
	Replicas map[string]struct {
		Role     string `json:"role"`
		Match    uint64 `json:"match"`
		State    string `json:"state"`
		Active   bool   `json:"active"`
		CaughtUp bool   `json:"caught_up"`
	} `json:"replicas"`
}

func newMemberCmd(a *app) *cobra.Command {
	var streams []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "member",
		Short: "Membership of streams: list, add, promote, remove, replace (docs/operations.md)",
		Args:  exactArgs(0, "a subcommand: list, add, promote, remove, replace"),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringSliceVar(&streams, "stream", nil, "streams to act on (default: every stream the --admin server hosts)")
	cmd.PersistentFlags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long promote and replace wait for a learner to catch up")
	list := &cobra.Command{
		Use:   "list",
		Short: "Show each stream's voters and learners and how far each replica is",
		Args:  exactArgs(0, "none"),
		RunE: func(*cobra.Command, []string) error {
			names, err := a.streams(streams)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.stdout, 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "STREAM\tLEADER\tNODE\tROLE\tMATCH\tCOMMIT\tSTATE\tACTIVE\tCAUGHT-UP")
			for _, name := range names {
				ms, err := a.members(name)
				if err != nil {
					return err
				}
				for _, id := range append(slices.Clone(ms.Voters), ms.Learners...) {
					r := ms.Replicas[strconv.FormatUint(id, 10)]
					role := r.Role
					if role == "" {
						role = map[bool]string{true: "learner", false: "voter"}[slices.Contains(ms.Learners, id)]
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t%v\t%v\n", ms.Stream, ms.Leader, id, role, r.Match, ms.Commit,
						strings.TrimPrefix(r.State, "State"), r.Active, r.CaughtUp)
				}
			}
			return tw.Flush()
		},
	}
	add := &cobra.Command{
		Use:   "add NODE",
		Short: "Add a server as a learner (it catches up without voting)",
		Args:  exactArgs(1, "the node id"),
		RunE: func(_ *cobra.Command, args []string) error {
			return a.eachStream(streams, args[0], func(name string, id uint64) error { return a.memberOp(http.MethodPost, name, id, "") })
		},
	}
	promote := &cobra.Command{
		Use:   "promote NODE",
		Short: "Make a learner a voter once it has caught up (waits up to --timeout)",
		Args:  exactArgs(1, "the node id"),
		RunE: func(_ *cobra.Command, args []string) error {
			return a.eachStream(streams, args[0], func(name string, id uint64) error { return a.promote(name, id, timeout) })
		},
	}
	remove := &cobra.Command{
		Use:   "remove NODE",
		Short: "Remove a server from the streams (refused if a quorum would be lost)",
		Args:  exactArgs(1, "the node id"),
		RunE: func(_ *cobra.Command, args []string) error {
			return a.eachStream(streams, args[0], func(name string, id uint64) error { return a.memberOp(http.MethodDelete, name, id, "") })
		},
	}
	replace := &cobra.Command{
		Use:   "replace OLD [NEW]",
		Short: "Replace server OLD by NEW (default: OLD again, started on an empty data dir)",
		Long: `Replace server OLD by server NEW in every stream (or --stream).

NEW != OLD: in each stream, add NEW as a learner, wait until it caught up,
promote it, then remove OLD.

NEW == OLD (a server whose disk was replaced: its old votes and log are gone,
and its peers refuse it until it is replaced): remove it from every stream
first (its peers then forget its old data dir), then add it back as a learner
everywhere and promote it in each stream once caught up.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(_ *cobra.Command, args []string) error {
			old, err := parseNode(args[0])
			if err != nil {
				return err
			}
			nw := old
			if len(args) == 2 {
				if nw, err = parseNode(args[1]); err != nil {
					return err
				}
			}
			names, err := a.streams(streams)
			if err != nil {
				return err
			}
			return a.replace(names, old, nw, timeout)
		},
	}
	cmd.AddCommand(list, add, promote, remove, replace)
	return cmd
}

func parseNode(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, usageError{fmt.Errorf("node id %q: want a positive integer", s)}
	}
	return id, nil
}

// streams returns the names given, or every stream the server hosts.
func (a *app) streams(given []string) ([]string, error) {
	if len(given) > 0 {
		return given, nil
	}
	body, err := adminDo(http.MethodGet, adminURL(a.admin, "/status", nil))
	if err != nil {
		return nil, err
	}
	var st struct {
		Streams []struct {
			Name string `json:"name"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("bad status answer: %w", err)
	}
	var names []string
	for _, s := range st.Streams {
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("the server at %s hosts no stream", a.admin)
	}
	return names, nil
}

func (a *app) eachStream(given []string, node string, f func(name string, id uint64) error) error {
	id, err := parseNode(node)
	if err != nil {
		return err
	}
	names, err := a.streams(given)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := f(name, id); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) members(name string) (membersStatus, error) {
	var ms membersStatus
	body, err := adminRetry(http.MethodGet, adminURL(a.admin, "/streams/"+url.PathEscape(name)+"/members", nil))
	if err != nil {
		return ms, err
	}
	if err := json.Unmarshal(body, &ms); err != nil {
		return ms, fmt.Errorf("bad members answer: %w", err)
	}
	return ms, nil
}

// memberOp runs one membership operation (the server forwards it to the
// stream's leader) and prints its result.
func (a *app) memberOp(method, name string, id uint64, suffix string) error {
	body, err := adminRetry(method, adminURL(a.admin, fmt.Sprintf("/streams/%s/members/%d%s", url.PathEscape(name), id, suffix), nil))
	if err != nil {
		return err
	}
	printResult(a, body)
	return nil
}

// promote waits until the learner caught up, then promotes it.
func (a *app) promote(name string, id uint64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ms, err := a.members(name)
		if err != nil {
			return err
		}
		if slices.Contains(ms.Voters, id) {
			fmt.Fprintf(a.stdout, "node %d is a voter of %s\n", id, name)
			return nil
		}
		if ms.Replicas[strconv.FormatUint(id, 10)].CaughtUp {
			if err := a.memberOp(http.MethodPost, name, id, "/promote"); err == nil {
				return nil
			} else if time.Now().After(deadline) {
				return err
			}
		} else if time.Now().After(deadline) {
			return fmt.Errorf("node %d did not catch up on %s within %s", id, name, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// replace replaces old by nw in the streams (see the command's help).
func (a *app) replace(names []string, old, nw uint64, timeout time.Duration) error {
	has := func(ms membersStatus, id uint64) bool {
		return slices.Contains(ms.Voters, id) || slices.Contains(ms.Learners, id)
	}
	if old == nw {
		for _, name := range names {
			ms, err := a.members(name)
			if err != nil {
				return err
			}
			if has(ms, old) {
				if err := a.memberOp(http.MethodDelete, name, old, ""); err != nil {
					return fmt.Errorf("removing node %d from %s: %w", old, name, err)
				}
			}
		}
	}
	for _, name := range names {
		ms, err := a.members(name)
		if err != nil {
			return err
		}
		if !has(ms, nw) {
			if err := a.retry(timeout, func() error { return a.memberOp(http.MethodPost, name, nw, "") }); err != nil {
				return fmt.Errorf("adding node %d to %s: %w", nw, name, err)
			}
		}
	}
	for _, name := range names {
		if err := a.promote(name, nw, timeout); err != nil {
			return err
		}
		if old != nw {
			ms, err := a.members(name)
			if err != nil {
				return err
			}
			if has(ms, old) {
				if err := a.memberOp(http.MethodDelete, name, old, ""); err != nil {
					return fmt.Errorf("removing node %d from %s: %w", old, name, err)
				}
			}
		}
	}
	fmt.Fprintf(a.stdout, "node %d replaced by node %d in %s\n", old, nw, strings.Join(names, ", "))
	return nil
}

// adminRetry is adminDo that rides out a leader election: a request
// answered 503 (no leader right now, leadership moved) is retried for up to
// 10 seconds.
func adminRetry(method, u string) ([]byte, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		body, err := adminDo(method, u)
		if err == nil || !strings.Contains(err.Error(), "503 Service Unavailable") || time.Now().After(deadline) {
			return body, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// retry runs f until it succeeds or timeout passes (a server just removed
// and re-admitted may need a moment to reconnect).
func (a *app) retry(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(300 * time.Millisecond)
	}
}
