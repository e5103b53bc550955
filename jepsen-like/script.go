// Package campaign runs VDL's cluster scenario scripts (testcases/*.txt,
// the files the deterministic simulator replays) against real `vdl server`
// processes, and writes a report a person can read: the first slice of the
// Jepsen-like campaigns (docs/testing.md, "Campaigns"). The scripts' command
// language is cluster-level on purpose — start-cluster, produce, kill,
// restart, run, status, check — so that one file exercises both the
// simulator and real processes. The expected outputs in the files are the
// simulator's (its terms and leaders are seeded); against real processes
// the runner prints what the cluster did and judges only what must hold
// whatever the timing: every acknowledged record is present at its offset,
// once, and the replicas agree.
package campaign

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Command is one line of a script: a name, positional arguments and
// key=value arguments.
type Command struct {
	Line int
	Name string
	Args []string
	Keys map[string]string
}

func (c Command) String() string {
	parts := []string{c.Name}
	parts = append(parts, c.Args...)
	for _, k := range sortedKeys(c.Keys) {
		parts = append(parts, k+"="+c.Keys[k])
	}
	return strings.Join(parts, " ")
}

// Parse reads a script in the datadriven format: comments (#), commands,
// and after each command "----" and its expected output up to a blank
// line (skipped here).
func Parse(r io.Reader) ([]Command, error) {
	var cmds []Command
	sc := bufio.NewScanner(r)
	line, inOutput := 0, false
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		switch {
		case inOutput:
			inOutput = text != ""
		case text == "" || strings.HasPrefix(text, "#"):
		case text == "----":
			inOutput = true
		default:
			cmds = append(cmds, parseCommand(line, text))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("no commands")
	}
	return cmds, nil
}

func parseCommand(line int, text string) Command {
	fields := strings.Fields(text)
	c := Command{Line: line, Name: fields[0], Keys: map[string]string{}}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			c.Keys[k] = v
		} else {
			c.Args = append(c.Args, f)
		}
	}
	return c
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
