package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/vdl-project/vdl/internal/pki"
)

func init() { addCommand(newProduceCmd) }

// clientFlags are the Kafka client flags produce and consume share.
type clientFlags struct {
	brokers string
	topic   string
	// a Kafka TLS listener (--tls, trusting --ca), with SASL when --user
	// is set (docs/security.md)
	tls                      bool
	ca                       string
	user, passwordFile, mech string
}

func (f *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.brokers, "brokers", "b", "127.0.0.1:9092", "comma-separated Kafka bootstrap addresses")
	cmd.Flags().StringVarP(&f.topic, "topic", "t", "", "stream (topic) name")
	cmd.Flags().BoolVar(&f.tls, "tls", false, "connect with TLS (the servers' kafka_tls_listen), trusting --kafka-ca")
	cmd.Flags().StringVar(&f.ca, "kafka-ca", os.Getenv("VDL_CA"), "CA certificate (PEM) of the Kafka TLS listener [$VDL_CA]")
	cmd.Flags().StringVar(&f.user, "user", os.Getenv("VDL_KAFKA_USER"), "SASL user [$VDL_KAFKA_USER]")
	cmd.Flags().StringVar(&f.passwordFile, "password-file", os.Getenv("VDL_KAFKA_PASSWORD_FILE"), "file holding the SASL password [$VDL_KAFKA_PASSWORD_FILE]")
	cmd.Flags().StringVar(&f.mech, "sasl-mechanism", "SCRAM-SHA-512", "SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN")
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
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DialTimeout(5 * time.Second)}
	if f.tls {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.ca != "" {
			pool, err := pki.Pool(f.ca)
			if err != nil {
				return nil, fmt.Errorf("--kafka-ca: %w", err)
			}
			cfg.RootCAs = pool
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if f.user != "" {
		m, err := f.sasl()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// sasl is the SASL mechanism of --user, --password-file, --sasl-mechanism.
func (f *clientFlags) sasl() (sasl.Mechanism, error) {
	if f.passwordFile == "" {
		return nil, usageError{fmt.Errorf("--user needs --password-file")}
	}
	b, err := os.ReadFile(f.passwordFile)
	if err != nil {
		return nil, fmt.Errorf("--password-file: %w", err)
	}
	pass := strings.TrimRight(string(b), "\r\n")
	switch f.mech {
	case "SCRAM-SHA-256":
		return scram.Auth{User: f.user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: f.user, Pass: pass}.AsSha512Mechanism(), nil
	case "PLAIN":
		if !f.tls {
			return nil, usageError{fmt.Errorf("--sasl-mechanism PLAIN sends the password in clear: use it with --tls")}
		}
		return plain.Auth{User: f.user, Pass: pass}.AsMechanism(), nil
	}
	return nil, usageError{fmt.Errorf("--sasl-mechanism %q: want SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN", f.mech)}
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
