package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vdl-project/vdl/internal/proccluster"
)

// freeBase is a port base for `vdl dev --port`: it needs base..+2,
// +100.., +200.., +300.., +1000.. and +1300.. free, all below 20000: the
// other tests' ports come from [20000, 32768) (internal/testnet), and a
// restarted node there must find its port still free.
func freeBase(t *testing.T) int {
	for base := 10000 + int(time.Now().UnixNano()%600)*10; base+1302 < 20000; base += 37 {
		ok := true
		for _, off := range []int{0, 100, 200, 300, 1000, 1300} {
			for i := range 3 {
				if !portFree(base + off + i) {
					ok = false
				}
			}
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free port range for vdl dev")
	return 0
}

// make run is `vdl dev`: three config servers and three servers come up,
// "demo" is there to produce to and consume from, and a stream created
// right after with vdlctl (or a Kafka admin client) works at once.
func TestDevCluster(t *testing.T) {
	bin := proccluster.Production.Path(t)
	vdlctl := proccluster.Vdlctl.Path(t)
	dir := t.TempDir()
	base := freeBase(t)
	cmd := exec.Command(bin, "dev", "--dir", dir, "--port", fmt.Sprint(base), "--dcs", "3")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	up := make(chan string, 1)
	go func() {
		var sb strings.Builder
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			sb.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "Logs and data:") {
				up <- sb.String()
			}
		}
	}()
	var banner string
	select {
	case banner = <-up:
	case <-time.After(90 * time.Second):
		t.Fatalf("vdl dev did not come up (logs in %s)", dir)
	}
	require.Contains(t, banner, "3 config servers, 3 servers")
	require.Contains(t, banner, "vdlctl stream create")

	brokers := []string{fmt.Sprintf("127.0.0.1:%d", base), fmt.Sprintf("127.0.0.1:%d", base+1), fmt.Sprintf("127.0.0.1:%d", base+2)}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("demo"))
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Value: []byte("hello")}).FirstErr())
	if kcat, err := exec.LookPath("kcat"); err == nil {
		// librdkafka's idempotent producer asks any broker for a producer
		// id: every server forwards to the offsets stream's leader.
		for _, b := range brokers {
			c := exec.CommandContext(ctx, kcat, "-P", "-b", b, "-t", "demo", "-X", "enable.idempotence=true", "-X", "message.timeout.ms=20000")
			c.Stdin = strings.NewReader("from kcat\n")
			out, err := c.CombinedOutput()
			require.NoError(t, err, "kcat via %s: %s", b, out)
		}
	}

	// vdlctl against the config servers, with what the banner exports.
	env := append(os.Environ(), "VDL_CA="+filepath.Join(dir, "certs", "ca.crt"), "VDL_ADMIN_TOKEN_FILE="+filepath.Join(dir, "certs", "admin.token"),
		fmt.Sprintf("VDL_CONFIG_SERVERS=127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", base+300, base+301, base+302))
	ctl := func(args ...string) (string, error) {
		c := exec.Command(vdlctl, args...)
		c.Env = env
		b, err := c.CombinedOutput()
		return string(b), err
	}
	o, err := ctl("stream", "create", "orders", "--preferred-dc", "dc2")
	require.NoError(t, err, o)
	require.Regexp(t, `orders\s+\d+\s+2,`, o, "placed with its preferred leader in dc2 (server 2) first")
	// It returns once the stream has a leader: its replicas host it, so the
	// produce right after does not meet an unknown topic (franz-go gives up
	// after 4 such answers, which a loaded machine took to reach).
	require.Regexp(t, `orders\s+\d+\s+[\d,]+\s+\d+\s`, o, "a leader in the table")
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("o1")}).FirstErr())
	o, err = ctl("cluster", "status")
	require.NoError(t, err, o)
	require.Regexp(t, `(?m)^2\s+dc2\s+-\s+active\s+up`, o)
	o, err = ctl("stream", "create", "orders")
	require.Error(t, err)
	require.Contains(t, o, `already exists: stream "orders"`)

	created, err := kadm.NewClient(cl).CreateTopics(ctx, 1, 3, nil, "events")
	require.NoError(t, err)
	require.NoError(t, created["events"].Err)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Value: []byte("e1")}).FirstErr())
	o, err = ctl("stream", "list", "-o", "json")
	require.NoError(t, err, o)
	for _, name := range []string{"demo", "orders", "events", "__consumer_offsets"} {
		require.Contains(t, o, `"name": "`+name+`"`)
	}
	// Filtered and limited, for thousands of streams.
	o, err = ctl("stream", "list", "--prefix", "ord")
	require.NoError(t, err, o)
	require.Contains(t, o, "orders")
	require.NotContains(t, o, "events")
	o, err = ctl("stream", "list", "--limit", "1")
	require.NoError(t, err, o)
	require.Contains(t, o, "__consumer_offsets")
	require.Contains(t, o, "... and 3 more")
	admin := fmt.Sprintf("127.0.0.1:%d", base+100)
	o, err = ctl("status", "--admin", admin, "--limit", "1")
	require.NoError(t, err, o)
	require.Contains(t, o, "__consumer_offsets")
	require.Contains(t, o, "... and 3 more")
	o, err = ctl("status", "--admin", admin, "--prefix", "ev")
	require.NoError(t, err, o)
	require.Contains(t, o, "events")
	require.NotContains(t, o, "orders")
	o, err = ctl("status", "--admin", admin, "--limit", "-1")
	require.Error(t, err)
	require.Contains(t, o, "--limit -1: want a count")
}

func portFree(p int) bool {
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}
