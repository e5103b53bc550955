package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
)

func init() { addCommand(newProduceCmd) }

// clientFlags are the Kafka client flags produce and consume share.
type clientFlags struct {
	brokers string
	topic   string
}

func (f *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.brokers, "brokers", "b", "127.0.0.1:9092", "comma-separated Kafka bootstrap addresses")
	cmd.Flags().StringVarP(&f.topic, "topic", "t", "", "stream (topic) name")
}

func (f *clientFlags) opts() ([]kgo.Opt, error) {
	if f.topic == "" {
		return nil, usageError{fmt.Errorf("--topic is required")}
	}
	var seeds []string
	for _, b := range strings.Split(f.brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			seeds = append(seeds, b)
		}
	}
	if len(seeds) == 0 {
		return nil, usageError{fmt.Errorf("--brokers is empty")}
	}
	return []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DialTimeout(5 * time.Second)}, nil
}

func newProduceCmd(a *app) *cobra.Command {
	var cf clientFlags
	var key string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "produce -b BROKERS -t TOPIC [VALUE...]",
		Short: "Produce values (arguments, or one per line of stdin) with acks=all, like kcat -P",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := cf.opts()
			if err != nil {
				return err
			}
			opts = append(opts, kgo.DefaultProduceTopic(cf.topic), kgo.RequiredAcks(kgo.AllISRAcks()),
				kgo.DisableIdempotentWrite(), kgo.ProducerLinger(5*time.Millisecond), kgo.RecordDeliveryTimeout(timeout))
			cl, err := kgo.NewClient(opts...)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			var values []string
			if len(args) > 0 {
				values = args
			} else {
				sc := bufio.NewScanner(os.Stdin)
				sc.Buffer(make([]byte, 1<<20), 16<<20)
				for sc.Scan() {
					values = append(values, sc.Text())
				}
				if err := sc.Err(); err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
			}
			var firstErr error
			n := 0
			for _, v := range values {
				r := &kgo.Record{Value: []byte(v)}
				if key != "" {
					r.Key = []byte(key)
				}
				cl.Produce(ctx, r, func(r *kgo.Record, err error) {
					if err != nil && firstErr == nil {
						firstErr = err
					}
					if err == nil {
						n++
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				return err
			}
			if firstErr != nil {
				return fmt.Errorf("produce to %s: %w (%d of %d acknowledged)", cf.topic, firstErr, n, len(values))
			}
			fmt.Fprintf(a.stderr, "produced %d record(s) to %s\n", n, cf.topic)
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().StringVarP(&key, "key", "k", "", "record key")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "give up on a record after this long")
	return cmd
}
