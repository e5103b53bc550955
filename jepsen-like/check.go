package campaign

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vdl-project/vdl/checker"
)

// check: what must hold whatever the timing. Once the running replicas of
// each stream settle on one end, every acknowledged value is in the stream
// at the offset it was acknowledged at, no value is there twice, and the
// replicas agree on where the stream ends; and the history of every
// produce so far, with the final read of each stream, is linearizable
// (porcupine) and free of the anomalies the checker knows.
func (r *runner) check(cmd Command) (string, error) {
	var sb strings.Builder
	var errs []error
	final := map[string][]string{}
	ends := map[string]int64{}
	for _, s := range r.streams {
		end, err := r.settle(s, 30*time.Second)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
			continue
		}
		got, err := r.readAll(s, end)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s, err))
			continue
		}
		final[s] = inOrder(got, end)
		ends[s] = end
		lost, moved, dup := r.judge(s, got)
		fmt.Fprintf(&sb, "%s: %d acknowledged; replicas agree at end offset %d; lost %d, at another offset %d, duplicated %d\n",
			s, len(r.acked[s]), end, lost, moved, dup)
		if lost+moved+dup > 0 {
			errs = append(errs, fmt.Errorf("%s: %d acknowledged values lost, %d at another offset, %d duplicated%s", s, lost, moved, dup, duplicates(got)))
		}
	}
	if len(errs) == 0 {
		out, err := r.checkHistory(final)
		sb.WriteString(out)
		errs = append(errs, err)
	}
	if len(r.c.ConfigServers) > 0 {
		out, err := r.preferredDCs()
		if out != "" {
			sb.WriteString(out + "\n")
		}
		errs = append(errs, err)
	}
	if cmd.Keys["converge"] == "1" && len(ends) > 0 {
		out, err := r.converge(ends)
		sb.WriteString(out + "\n")
		errs = append(errs, err)
	}
	return strings.TrimRight(sb.String(), "\n"), errors.Join(errs...)
}

// checkHistory runs the history checker on every produce so far and the
// final reads.
func (r *runner) checkHistory(final map[string][]string) (string, error) {
	ops := r.history.History()
	opts := checker.Options{FinalLog: final, Timeout: 30 * time.Second}
	for _, f := range r.faultWindows(r.now()) {
		opts.Faults = append(opts.Faults, checker.FaultWindow{Start: f.Start, End: f.End, Kind: f.Kind, Detail: f.Detail})
	}
	if r.opts.ReportDir != "" {
		opts.OutDir = filepath.Join(r.opts.ReportDir, fmt.Sprintf("check-%d", len(r.checks)+1))
	}
	res := checker.Check(ops, opts)
	r.mu.Lock()
	r.checks = append(r.checks, res)
	r.mu.Unlock()
	if res.OK {
		return fmt.Sprintf("history: %d produces, linearizable, no anomaly\n", len(ops)), nil
	}
	var why []string
	why = append(why, res.Errors...)
	for _, s := range res.Streams {
		for _, f := range s.Failures {
			why = append(why, s.Stream+": "+f)
		}
	}
	return fmt.Sprintf("history: %d produces, NOT OK\n", len(ops)), fmt.Errorf("history check: %s", strings.Join(why, "; "))
}

// inOrder lists the values of offsets [0, end).
func inOrder(got map[int64]string, end int64) []string {
	out := make([]string, end)
	for o := range end {
		out[o] = got[o]
	}
	return out
}

// settle waits until every running replica of stream has the same end
// offset, all of it committed, and returns it.
func (r *runner) settle(stream string, timeout time.Duration) (int64, error) {
	r.c.WaitLeader(stream, timeout)
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		end, ok, seen := r.ends(stream)
		if ok {
			return end, nil
		}
		last = seen
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("replicas did not agree within %v: %s", timeout, last)
}

// ends reports whether the running replicas agree on the stream's end
// (with it committed everywhere), and what they said.
func (r *runner) ends(stream string) (int64, bool, string) {
	var said []string
	end, agree := int64(-1), true
	for _, n := range r.c.Nodes {
		if !n.Running() {
			continue
		}
		st, err := r.c.StreamStatus(n.ID, stream)
		if err != nil {
			return 0, false, err.Error()
		}
		said = append(said, fmt.Sprintf("n%d end=%d hwm=%d", n.ID, st.EndOffset, st.HighWatermark))
		if end < 0 {
			end = st.EndOffset
		}
		agree = agree && st.EndOffset == end && st.HighWatermark == end
	}
	return end, agree && end >= 0, strings.Join(said, ", ")
}

// readAll consumes the stream from its start to end: offset -> value.
func (r *runner) readAll(stream string, end int64) (map[int64]string, error) {
	got := map[int64]string{}
	if end == 0 {
		return got, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.c.KafkaAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return got, fmt.Errorf("read stuck before offset %d: %w", end, ctx.Err())
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return got, ferr
		}
		done := false
		fs.EachRecord(func(rec *kgo.Record) {
			got[rec.Offset] = string(rec.Value)
			done = done || rec.Offset >= end-1
		})
		if done {
			return got, nil
		}
	}
}

// judge counts the acknowledged values missing, found at another offset,
// and any value stored more than once.
func (r *runner) judge(stream string, got map[int64]string) (lost, moved, dup int) {
	where := map[string]int{}
	for _, v := range got {
		where[v]++
	}
	for _, n := range where {
		if n > 1 {
			dup++
		}
	}
	for _, a := range r.acked[stream] {
		switch {
		case got[a.offset] == a.value:
		case where[a.value] > 0:
			moved++
		default:
			lost++
		}
	}
	return lost, moved, dup
}

// duplicates names up to five values stored more than once, with their
// offsets and the client that wrote them (": s1-7 at [3 9] (kcat)").
func duplicates(got map[int64]string) string {
	at := map[string][]int64{}
	for o, v := range got {
		at[v] = append(at[v], o)
	}
	var out []string
	for v, offs := range at {
		if len(offs) > 1 {
			slices.Sort(offs)
			out = append(out, fmt.Sprintf("%s at %v", v, offs))
		}
	}
	if len(out) == 0 {
		return ""
	}
	slices.Sort(out)
	return ": " + strings.Join(out[:min(5, len(out))], ", ")
}
