package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func init() {
	addCommand(newStatusCmd)
	addCommand(newStreamCmd)
}

// adminURL turns --admin (host:port or URL) and a path into a URL.
func adminURL(admin, path string, q url.Values) string {
	base := admin
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimRight(base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

var httpClient = &http.Client{Timeout: 15 * time.Second}

// adminDo sends a request to the admin HTTP and returns the body of a 2xx
// answer, or an error carrying the server's message.
func adminDo(method, u string) ([]byte, error) {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin HTTP unreachable: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode/100 != 2 {
		msg := strings.TrimSpace(string(body))
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, msg)
	}
	return body, nil
}

// printResult prints an admin answer: its "result" line if it has one.
func printResult(a *app, body []byte) {
	var r struct {
		Result string `json:"result"`
	}
	if json.Unmarshal(body, &r) == nil && r.Result != "" {
		fmt.Fprintln(a.stdout, r.Result)
		return
	}
	_, _ = a.stdout.Write(body)
}

func newStatusCmd(a *app) *cobra.Command {
	var asJSON bool
	var prefix string
	var limit int
	cmd := &cobra.Command{
		Use:   "status [--prefix P] [--limit N]",
		Short: "Show the streams a server hosts: leader, role, offsets, replicas",
		Args:  exactArgs(0, "none"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return fmt.Errorf("--limit %d: want a count (0: every stream)", limit)
			}
			q := url.Values{}
			if prefix != "" {
				q.Set("prefix", prefix)
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			body, err := adminDo(http.MethodGet, adminURL(a.admin, "/status", q))
			if err != nil {
				return err
			}
			if asJSON {
				_, err := a.stdout.Write(body)
				return err
			}
			var st struct {
				NodeID  uint64 `json:"node_id"`
				Profile string `json:"profile"`
				Total   int    `json:"total"`
				Streams []struct {
					Name           string   `json:"name"`
					Leader         uint64   `json:"leader"`
					Role           string   `json:"role"`
					Term           uint64   `json:"term"`
					StartOffset    int64    `json:"start_offset"`
					HighWatermark  int64    `json:"high_watermark"`
					EndOffset      int64    `json:"end_offset"`
					Voters         []uint64 `json:"voters"`
					InSync         []uint64 `json:"in_sync"`
					RetentionMs    int64    `json:"retention_ms"`
					RetentionBytes int64    `json:"retention_bytes"`
				} `json:"streams"`
			}
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("bad status answer: %w", err)
			}
			fmt.Fprintf(a.stdout, "node %d, profile %s\n", st.NodeID, st.Profile)
			tw := tabwriter.NewWriter(a.stdout, 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "STREAM\tLEADER\tROLE\tTERM\tSTART\tHWM\tEND\tVOTERS\tIN-SYNC\tRETENTION")
			for _, s := range st.Streams {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%d\t%v\t%v\t%s\n", s.Name, s.Leader, strings.TrimPrefix(s.Role, "State"), s.Term,
					s.StartOffset, s.HighWatermark, s.EndOffset, s.Voters, s.InSync, retention(s.RetentionMs, s.RetentionBytes))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if more := st.Total - len(st.Streams); more > 0 {
				fmt.Fprintf(a.stdout, "... and %d more (--limit 0 shows every stream, --prefix filters)\n", more)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the raw JSON")
	cmd.Flags().StringVar(&prefix, "prefix", "", "only the streams whose names start with this")
	cmd.Flags().IntVar(&limit, "limit", 100, "show at most this many streams, by name (0: all)")
	return cmd
}

// retention describes a stream's retention policy.
func retention(ms, bytes int64) string {
	var parts []string
	if ms > 0 {
		parts = append(parts, (time.Duration(ms) * time.Millisecond).String())
	}
	if bytes > 0 {
		parts = append(parts, fmt.Sprintf("%d bytes", bytes))
	}
	if len(parts) == 0 {
		return "for ever"
	}
	return strings.Join(parts, ", ")
}

func newStreamCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stream",
		Short: "Streams: create, delete, describe, list, alter (config servers); retain, transfer-leader (the stream's leader)",
		Args:  exactArgs(0, "a subcommand: create, delete, describe, list, alter, retain, transfer-leader"),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var before int64
	retain := &cobra.Command{
		Use:   "retain NAME --before OFFSET",
		Short: "Delete the stream's whole head segments below OFFSET on every replica",
		Args:  exactArgs(1, "the stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("before") || before < 0 {
				return usageError{fmt.Errorf("--before OFFSET (>= 0) is required")}
			}
			body, err := adminDo(http.MethodPost, adminURL(a.admin, "/streams/"+url.PathEscape(args[0])+"/retain", url.Values{"before": {fmt.Sprint(before)}}))
			if err != nil {
				return err
			}
			printResult(a, body)
			return nil
		},
	}
	retain.Flags().Int64Var(&before, "before", 0, "offset below which whole segments are deleted")
	var to uint64
	transfer := &cobra.Command{
		Use:   "transfer-leader NAME --to NODE",
		Short: "Hand the stream's leadership to another replica",
		Args:  exactArgs(1, "the stream name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == 0 {
				return usageError{fmt.Errorf("--to NODE is required")}
			}
			body, err := adminDo(http.MethodPost, adminURL(a.admin, "/streams/"+url.PathEscape(args[0])+"/transfer-leader", url.Values{"to": {fmt.Sprint(to)}}))
			if err != nil {
				return err
			}
			printResult(a, body)
			return nil
		},
	}
	transfer.Flags().Uint64Var(&to, "to", 0, "node id of the new leader")
	cmd.AddCommand(retain, transfer)
	addStreamAdminCmds(a, cmd)
	return cmd
}
