package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
)

func init() { addCommand(newConsumeCmd) }

func newConsumeCmd(a *app) *cobra.Command {
	var cf clientFlags
	var fromBeginning, exitAtEnd, printOffsets bool
	var offset int64
	var count int
	cmd := &cobra.Command{
		Use:   "consume -b BROKERS -t TOPIC [--from-beginning|--offset N] [--exit] [--count N]",
		Short: "Print a stream's values, one per line, like kcat -C",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := cf.opts()
			if err != nil {
				return err
			}
			start := kgo.NewOffset().AtEnd()
			switch {
			case cmd.Flags().Changed("offset"):
				if offset < 0 {
					return usageError{fmt.Errorf("--offset must be >= 0, got %d", offset)}
				}
				start = kgo.NewOffset().At(offset)
			case fromBeginning:
				start = kgo.NewOffset().AtStart()
			}
			opts = append(opts, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cf.topic: {0: start}}))
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			var end int64 = -1
			if exitAtEnd {
				if end, err = highWatermark(ctx, cl, cf.topic); err != nil {
					return err
				}
			}
			seen := 0
			next := int64(-1)
			for {
				if exitAtEnd && next >= end && (next >= 0 || end == 0) {
					return nil
				}
				if count > 0 && seen >= count {
					return nil
				}
				pctx := ctx
				if exitAtEnd && end == 0 {
					return nil
				}
				fs := cl.PollFetches(pctx)
				if ctx.Err() != nil {
					return nil
				}
				for _, e := range fs.Errors() {
					return fmt.Errorf("fetch %s: %w", e.Topic, e.Err)
				}
				for _, r := range fs.Records() {
					if printOffsets {
						fmt.Fprintf(a.stdout, "%d\t%s\n", r.Offset, r.Value)
					} else {
						fmt.Fprintf(a.stdout, "%s\n", r.Value)
					}
					next = r.Offset + 1
					seen++
					if count > 0 && seen >= count {
						return nil
					}
				}
			}
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&fromBeginning, "from-beginning", false, "start at the first stored offset (default: the end)")
	cmd.Flags().Int64VarP(&offset, "offset", "o", 0, "start at this offset")
	cmd.Flags().BoolVarP(&exitAtEnd, "exit", "e", false, "exit after the last committed record at start-up")
	cmd.Flags().IntVarP(&count, "count", "c", 0, "exit after this many records")
	cmd.Flags().BoolVar(&printOffsets, "offsets", false, "print each record's offset before its value")
	return cmd
}

// highWatermark asks for the stream's committed end offset.
func highWatermark(ctx context.Context, cl *kgo.Client, topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := kmsgListOffsets(topic)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerrErr(p.ErrorCode); err != nil {
				return 0, fmt.Errorf("list offsets of %s: %w", topic, err)
			}
			return p.Offset, nil
		}
	}
	return 0, fmt.Errorf("list offsets of %s: empty answer", topic)
}
