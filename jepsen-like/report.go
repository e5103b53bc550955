package campaign

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteReport writes results as Markdown: a summary line per script, then
// each script's steps with what the cluster printed and, for a failed step,
// why.
func WriteReport(w io.Writer, bin string, results []Result) {
	fmt.Fprintf(w, "# VDL campaign report\n\n%s, binary %s\n\n", time.Now().UTC().Format(time.RFC3339), bin)
	fmt.Fprintln(w, "| script | verdict | steps | unsupported |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %s | %d | %d |\n", r.Script, verdict(r), len(r.Steps), unsupported(r))
	}
	for _, r := range results {
		fmt.Fprintf(w, "\n## %s — %s\n", r.Script, verdict(r))
		for _, s := range r.Steps {
			fmt.Fprintf(w, "\n`%s` (line %d, %v)\n", s.Command, s.Command.Line, s.Took.Round(time.Millisecond))
			if s.Output != "" {
				fmt.Fprintf(w, "\n```\n%s\n```\n", s.Output)
			}
			if s.Err != nil {
				fmt.Fprintf(w, "\n**%s**: %v\n", stepVerdict(s), s.Err)
			}
		}
	}
}

func verdict(r Result) string {
	if r.Interrupted {
		return "INTERRUPTED"
	}
	for _, s := range r.Steps {
		if s.Err != nil && !errors.Is(s.Err, errUnsupported) {
			return "FAIL"
		}
	}
	if unsupported(r) > 0 {
		return "INCOMPLETE"
	}
	return "PASS"
}

func stepVerdict(s Step) string {
	if errors.Is(s.Err, errUnsupported) {
		return "skipped"
	}
	return "failed"
}

func unsupported(r Result) int {
	n := 0
	for _, s := range r.Steps {
		if errors.Is(s.Err, errUnsupported) {
			n++
		}
	}
	return n
}

// Verdict is a script's outcome: PASS, FAIL (something that must hold did
// not), or INCOMPLETE (steps the runner cannot do yet were skipped).
func Verdict(r Result) string { return verdict(r) }

// Why names what failed a run: its first failing step (line, command,
// error), "" if none did. Printed beside the verdict so that a failure
// is explained where it is seen, also when the report directory is gone.
func Why(r Result) string {
	for _, s := range r.Steps {
		if s.Err != nil && !errors.Is(s.Err, errUnsupported) {
			return fmt.Sprintf("line %d %q: %v", s.Command.Line, s.Command.String(), s.Err)
		}
	}
	return ""
}

// Summary is one line per result.
func Summary(results []Result) string {
	var sb strings.Builder
	for _, r := range results {
		fmt.Fprintf(&sb, "%-28s %s\n", r.Script, verdict(r))
	}
	return sb.String()
}
