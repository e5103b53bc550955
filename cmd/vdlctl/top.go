package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/kafka"
)

func init() { addCommand(newTopCmd) }

// vdlctl top: a live view of the streams one server hosts (produce rate,
// high watermark, leader, in-sync replicas) and, when that server is the
// group coordinator, of the consumer groups (consume rate, lag), refreshed
// every --interval from GET /status and GET /groups. Rates are the
// difference between two refreshes: records per second.

// topSnapshot is what one refresh read.
type topSnapshot struct {
	at      time.Time
	node    uint64
	streams []topStream
	groups  *kafka.CoordinatorStatus // nil when /groups could not be read
}

type topStream struct {
	Name          string   `json:"name"`
	Leader        uint64   `json:"leader"`
	Role          string   `json:"role"`
	Term          uint64   `json:"term"`
	StartOffset   int64    `json:"start_offset"`
	HighWatermark int64    `json:"high_watermark"`
	Voters        []uint64 `json:"voters"`
	InSync        []uint64 `json:"in_sync"`
}

func newTopCmd(a *app) *cobra.Command {
	var interval time.Duration
	var count int
	var plain bool
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Live view of a server's streams (produce rate, leaders, in-sync replicas) and consumer groups (consume rate, lag)",
		Long: `Refreshes every --interval from the server at --admin: its streams
(GET /status) and, if it coordinates the consumer groups (it leads
__consumer_offsets), the groups' committed offsets and lag (GET /groups).
Rates are records per second between two refreshes. Ctrl-C quits.`,
		Args: exactArgs(0, "none"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usageError{fmt.Errorf("--interval must be positive, got %v", interval)}
			}
			return runTop(a, interval, count, plain)
		},
	}
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "refresh period")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many refreshes (0: until Ctrl-C)")
	cmd.Flags().BoolVar(&plain, "plain", false, "print one view after another instead of redrawing the screen")
	return cmd
}

func runTop(a *app, interval time.Duration, count int, plain bool) error {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt)
	defer signal.Stop(stop)
	var prev *topSnapshot
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for n := 0; count == 0 || n < count; n++ {
		cur, err := readTop(a.admin)
		if err != nil {
			return err
		}
		if !plain {
			fmt.Fprint(a.stdout, "\x1b[H\x1b[2J") // home, clear screen
		}
		renderTop(a.stdout, prev, cur)
		prev = cur
		if count != 0 && n+1 == count {
			break
		}
		select {
		case <-tick.C:
		case <-stop:
			return nil
		}
	}
	return nil
}

func readTop(admin string) (*topSnapshot, error) {
	body, err := adminDo(http.MethodGet, adminURL(admin, "/status", nil))
	if err != nil {
		return nil, err
	}
	var st struct {
		NodeID  uint64      `json:"node_id"`
		Streams []topStream `json:"streams"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("bad /status answer: %w", err)
	}
	snap := &topSnapshot{at: time.Now(), node: st.NodeID, streams: st.Streams}
	if body, err := adminDo(http.MethodGet, adminURL(admin, "/groups", nil)); err == nil {
		var gs kafka.CoordinatorStatus
		if json.Unmarshal(body, &gs) == nil {
			snap.groups = &gs
		}
	}
	return snap, nil
}

// renderTop prints the view of cur, with rates against prev (none on the
// first refresh).
func renderTop(w io.Writer, prev, cur *topSnapshot) {
	secs := 0.0
	if prev != nil {
		secs = cur.at.Sub(prev.at).Seconds()
	}
	fmt.Fprintf(w, "vdl top — node %d, %s\n\n", cur.node, cur.at.UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tLEADER\tROLE\tTERM\tSTART\tHWM\tPRODUCE/S\tIN-SYNC\tVOTERS")
	for _, s := range cur.streams {
		rate := "-"
		if p := prevStream(prev, s.Name); p != nil && secs > 0 {
			rate = fmt.Sprintf("%.1f", float64(s.HighWatermark-p.HighWatermark)/secs)
		}
		fmt.Fprintf(tw, "%s\tn%d\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", s.Name, s.Leader, strings.TrimPrefix(s.Role, "State"),
			s.Term, s.StartOffset, s.HighWatermark, rate, ids(s.InSync), ids(s.Voters))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	switch g := cur.groups; {
	case g == nil:
		fmt.Fprintln(w, "groups: not readable from this server")
	case !g.Coordinator:
		fmt.Fprintf(w, "groups: this server does not coordinate them (it does not lead %s)\n", g.OffsetsTopic)
	default:
		renderGroups(w, prev, g, secs)
	}
}

func renderGroups(w io.Writer, prev *topSnapshot, g *kafka.CoordinatorStatus, secs float64) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSTATE\tMEMBERS\tTOPIC\tCOMMITTED\tLAG\tCONSUME/S")
	for _, gr := range g.Groups {
		for _, o := range gr.Offsets {
			rate := "-"
			if before, ok := prevCommitted(prev, gr.Group, o.Topic, o.Partition); ok && secs > 0 {
				rate = fmt.Sprintf("%.1f", float64(o.Offset-before)/secs)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%d\t%s\n", gr.Group, gr.State, len(gr.Members), o.Topic, o.Offset, o.Lag, rate)
		}
		if len(gr.Offsets) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%d\t-\t-\t-\t-\n", gr.Group, gr.State, len(gr.Members))
		}
	}
	_ = tw.Flush()
}

func prevStream(prev *topSnapshot, name string) *topStream {
	if prev == nil {
		return nil
	}
	for i := range prev.streams {
		if prev.streams[i].Name == name {
			return &prev.streams[i]
		}
	}
	return nil
}

func prevCommitted(prev *topSnapshot, group, topic string, partition int32) (int64, bool) {
	if prev == nil || prev.groups == nil {
		return 0, false
	}
	for _, gr := range prev.groups.Groups {
		if gr.Group != group {
			continue
		}
		for _, o := range gr.Offsets {
			if o.Topic == topic && o.Partition == partition {
				return o.Offset, true
			}
		}
	}
	return 0, false
}

// ids prints node ids as n1,n2,n3.
func ids(v []uint64) string {
	v = slices.Sorted(slices.Values(v))
	var parts []string
	for _, id := range v {
		parts = append(parts, fmt.Sprintf("n%d", id))
	}
	return strings.Join(parts, ",")
}
