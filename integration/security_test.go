package integration

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	kafkago "github.com/segmentio/kafka-go"
	kgoscram "github.com/segmentio/kafka-go/sasl/scram"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	xscram "github.com/xdg-go/scram"
)

// The Kafka TLS listener with SASL, as clients meet it (docs/security.md):
// every real client produces and consumes over TLS + SCRAM (and PLAIN), is
// told the TLS listeners' addresses by Metadata, and a wrong password is
// refused with SASL_AUTHENTICATION_FAILED. One cluster serves every client:
// each writes its own stream range and reads it back from its offset.
func TestClientsOverTLSAndSASL(t *testing.T) {
	c := StartCluster(t, Options{})
	const stream = "s1"
	c.WaitLeader(stream, 20*time.Second)
	brokers := c.KafkaTLSAddrs()
	// Each client's run has its own deadline.
	timeout := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		return ctx
	}

	kgoClient := func(m sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DialTLSConfig(c.ClientTLS()),
			kgo.SASL(m), kgo.DefaultProduceTopic(stream), kgo.RetryTimeout(5 * time.Second)}, opts...)...)
		require.NoError(t, err)
		return cl
	}
	// kgoRoundTrip produces n values and reads them back from their first
	// offset on a second client.
	kgoRoundTrip := func(t *testing.T, m sasl.Mechanism, prefix string, n int) {
		ctx := timeout(t)
		p := kgoClient(m)
		defer p.Close()
		want := values(n, prefix)
		var first int64 = -1
		for _, v := range want {
			r, err := p.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).First()
			require.NoError(t, err)
			if first < 0 {
				first = r.Offset
			}
		}
		cons := kgoClient(m, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{stream: {0: kgo.NewOffset().At(first)}}))
		defer cons.Close()
		var got []string
		for len(got) < n {
			fs := cons.PollFetches(ctx)
			require.NoError(t, ctx.Err())
			fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
			fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		require.Equal(t, want, got)
	}

	t.Run("franz-go/SCRAM-SHA-256", func(t *testing.T) {
		kgoRoundTrip(t, scram.Auth{User: c.User, Pass: c.Password}.AsSha256Mechanism(), "kgo-256-", 50)
	})
	t.Run("franz-go/SCRAM-SHA-512", func(t *testing.T) {
		kgoRoundTrip(t, scram.Auth{User: c.User, Pass: c.Password}.AsSha512Mechanism(), "kgo-512-", 50)
	})
	t.Run("franz-go/PLAIN", func(t *testing.T) {
		kgoRoundTrip(t, plain.Auth{User: c.User, Pass: c.Password}.AsMechanism(), "kgo-plain-", 50)
	})
	t.Run("franz-go/metadata names the TLS listeners", func(t *testing.T) {
		cl := kgoClient(scram.Auth{User: c.User, Pass: c.Password}.AsSha256Mechanism())
		defer cl.Close()
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(timeout(t), cl)
		require.NoError(t, err)
		var addrs []string
		for _, b := range resp.Brokers {
			addrs = append(addrs, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
		}
		require.ElementsMatch(t, brokers, addrs)
	})

	wrong := []struct {
		name string
		m    sasl.Mechanism
	}{
		{"SCRAM-SHA-256", scram.Auth{User: c.User, Pass: "not-the-password"}.AsSha256Mechanism()},
		{"SCRAM-SHA-512", scram.Auth{User: "nobody", Pass: c.Password}.AsSha512Mechanism()},
		{"PLAIN", plain.Auth{User: c.User, Pass: "not-the-password"}.AsMechanism()},
	}
	// A client that cannot authenticate gets its answer, not a hang: one
	// Metadata request without retries.
	metadataErr := func(t *testing.T, opts ...kgo.Opt) error {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers[0]), kgo.RequestRetries(0)}, opts...)...)
		require.NoError(t, err)
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		require.Error(t, err)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "refused, not left hanging")
		return err
	}
	for _, w := range wrong {
		t.Run("wrong password/"+w.name, func(t *testing.T) {
			err := metadataErr(t, kgo.DialTLSConfig(c.ClientTLS()), kgo.SASL(w.m))
			require.ErrorIs(t, err, kerr.SaslAuthenticationFailed, "%v", err)
		})
	}
	t.Run("no TLS on the TLS listener", func(t *testing.T) {
		err := metadataErr(t)
		t.Logf("plain-text client refused: %v", err)
	})
	t.Run("no SASL on the TLS listener", func(t *testing.T) {
		err := metadataErr(t, kgo.DialTLSConfig(c.ClientTLS()))
		t.Logf("client without SASL refused: %v", err)
	})

	t.Run("sarama/SCRAM-SHA-512", func(t *testing.T) {
		ctx := timeout(t)
		cfg := saramaConfig(sarama.V2_1_0_0)
		cfg.Net.TLS.Enable, cfg.Net.TLS.Config = true, c.ClientTLS()
		cfg.Net.SASL.Enable, cfg.Net.SASL.Mechanism = true, sarama.SASLTypeSCRAMSHA512
		cfg.Net.SASL.User, cfg.Net.SASL.Password = c.User, c.Password
		cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgClient{h: xscram.SHA512} }
		want := values(50, "sarama-")
		prod, err := sarama.NewSyncProducer(brokers, cfg)
		require.NoError(t, err)
		var first int64 = -1
		for _, v := range want {
			_, off, err := prod.SendMessage(&sarama.ProducerMessage{Topic: stream, Value: sarama.StringEncoder(v)})
			require.NoError(t, err)
			if first < 0 {
				first = off
			}
		}
		require.NoError(t, prod.Close())
		cons, err := sarama.NewConsumer(brokers, cfg)
		require.NoError(t, err)
		defer cons.Close()
		pc, err := cons.ConsumePartition(stream, 0, first)
		require.NoError(t, err)
		defer pc.Close()
		var got []string
		for len(got) < len(want) {
			select {
			case m := <-pc.Messages():
				got = append(got, string(m.Value))
			case err := <-pc.Errors():
				t.Fatal(err)
			case <-ctx.Done():
				t.Fatalf("consumed %d of %d", len(got), len(want))
			}
		}
		require.Equal(t, want, got)

		cfg.Net.SASL.Password = "not-the-password"
		_, err = sarama.NewSyncProducer(brokers, cfg)
		require.ErrorIs(t, err, sarama.ErrSASLAuthenticationFailed)
	})

	t.Run("kafka-go/SCRAM-SHA-256", func(t *testing.T) {
		ctx := timeout(t)
		mech, err := kgoscram.Mechanism(kgoscram.SHA256, c.User, c.Password)
		require.NoError(t, err)
		w := &kafkago.Writer{Addr: kafkago.TCP(brokers...), Topic: stream, RequiredAcks: kafkago.RequireAll,
			BatchTimeout: 2 * time.Millisecond, Transport: &kafkago.Transport{TLS: c.ClientTLS(), SASL: mech}}
		want := values(50, "kafka-go-")
		var msgs []kafkago.Message
		for _, v := range want {
			msgs = append(msgs, kafkago.Message{Value: []byte(v)})
		}
		require.NoError(t, w.WriteMessages(ctx, msgs...))
		require.NoError(t, w.Close())
		require.Zero(t, w.Stats().Errors)

		dialer := &kafkago.Dialer{Timeout: 10 * time.Second, TLS: c.ClientTLS(), SASLMechanism: mech}
		r := kafkago.NewReader(kafkago.ReaderConfig{Brokers: brokers, Topic: stream, Partition: 0,
			MaxWait: 200 * time.Millisecond, Dialer: dialer})
		defer r.Close()
		require.NoError(t, r.SetOffset(kafkago.FirstOffset))
		var got []string
		for {
			m, err := r.ReadMessage(ctx)
			require.NoError(t, err)
			if strings.HasPrefix(string(m.Value), "kafka-go-") {
				got = append(got, string(m.Value))
			}
			if len(got) == len(want) {
				break
			}
		}
		require.Equal(t, want, got)

		bad, err := kgoscram.Mechanism(kgoscram.SHA256, c.User, "not-the-password")
		require.NoError(t, err)
		_, err = (&kafkago.Dialer{Timeout: 10 * time.Second, TLS: c.ClientTLS(), SASLMechanism: bad}).DialContext(ctx, "tcp", brokers[0])
		require.ErrorIs(t, err, kafkago.SASLAuthenticationFailed)
	})

	t.Run("kcat/SCRAM-SHA-256", func(t *testing.T) {
		ctx := timeout(t)
		kcat, err := exec.LookPath("kcat")
		if err != nil {
			t.Skip("kcat is not installed (Debian package kcat; .ci/run installs it)")
		}
		run := func(password string, stdin []byte, args ...string) ([]byte, error) {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			common := []string{"-b", strings.Join(brokers, ","), "-X", "security.protocol=SASL_SSL",
				"-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=" + c.User, "-X", "sasl.password=" + password,
				"-X", "ssl.ca.location=" + filepath.Join(c.Certs, "ca.crt")}
			cmd := exec.CommandContext(ctx, kcat, append(common, args...)...)
			cmd.Stdin = bytes.NewReader(stdin)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return out, errors.New(err.Error() + ": " + stderr.String())
			}
			return out, nil
		}
		want := values(50, "kcat-")
		_, err = run(c.Password, []byte(strings.Join(want, "\n")+"\n"), "-P", "-t", stream, "-X", "acks=all")
		require.NoError(t, err)
		out, err := run(c.Password, nil, "-C", "-t", stream, "-o", "beginning", "-e", "-q")
		require.NoError(t, err)
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.HasPrefix(l, "kcat-") {
				got = append(got, l)
			}
		}
		require.Equal(t, want, got)

		_, err = run("not-the-password", nil, "-L", "-t", stream)
		require.Error(t, err)
		require.Contains(t, err.Error(), "Authentication failed")
	})

	for _, n := range c.Nodes {
		require.True(t, n.Running(), "node %d is up", n.ID)
	}
}

// xdgClient is sarama's SCRAM client, from xdg-go/scram (sarama leaves the
// choice of implementation to its user).
type xdgClient struct {
	h    xscram.HashGeneratorFcn
	conv *xscram.ClientConversation
}

func (x *xdgClient) Begin(user, password, authz string) error {
	cl, err := x.h.NewClient(user, password, authz)
	if err != nil {
		return err
	}
	x.conv = cl.NewConversation()
	return nil
}

func (x *xdgClient) Step(challenge string) (string, error) { return x.conv.Step(challenge) }
func (x *xdgClient) Done() bool                            { return x.conv.Done() }
