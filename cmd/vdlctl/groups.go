package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/kafka"
)

func init() { addCommand(newGroupsCmd) }

func newGroupsCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "groups",
		Aliases: []string{"group"},
		Short:   "Show consumer groups: members, generations, committed offsets and lag",
		Long: `Shows the consumer groups as the server at --admin sees them (GET /groups).
Only the group coordinator — the leader of the __consumer_offsets stream —
knows the groups; another server says so and names nothing. Lag is the
stream's high watermark minus the committed offset, from that server's
replica.`,
		Args: exactArgs(0, "none"),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := adminDo(http.MethodGet, adminURL(a.admin, "/groups", nil))
			if err != nil {
				return err
			}
			var st kafka.CoordinatorStatus
			if err := json.Unmarshal(body, &st); err != nil {
				return fmt.Errorf("bad /groups answer: %w", err)
			}
			if asJSON {
				enc := json.NewEncoder(a.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			if !st.Coordinator {
				fmt.Fprintf(a.stdout, "this server is not the group coordinator (it does not lead %s; error %d)\n", st.OffsetsTopic, st.Error)
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "GROUP\tSTATE\tGENERATION\tPROTOCOL\tMEMBERS\tLEADER")
			for _, g := range st.Groups {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s/%s\t%d\t%s\n", g.Group, g.State, g.Generation, g.ProtocolType, g.Protocol, len(g.Members), g.Leader)
			}
			_ = tw.Flush()
			fmt.Fprintln(a.stdout)
			tw = tabwriter.NewWriter(a.stdout, 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "GROUP\tMEMBER\tCLIENT\tHOST")
			for _, g := range st.Groups {
				for _, m := range g.Members {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.Group, m.MemberID, m.ClientID, m.ClientHost)
				}
			}
			_ = tw.Flush()
			fmt.Fprintln(a.stdout)
			tw = tabwriter.NewWriter(a.stdout, 2, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tCOMMITTED\tHIGH-WATERMARK\tLAG\tMETADATA")
			for _, g := range st.Groups {
				for _, o := range g.Offsets {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%q\n", g.Group, o.Topic, o.Partition, o.Offset, o.HighWater, o.Lag, o.Metadata)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
