package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// kafkajs (Node.js) with idempotent: true, as its users run it: the
// fourth client of the idempotent-producer acceptance (franz-go, sarama,
// librdkafka's kcat, kafkajs). The package is pinned in kafkajs/package.json
// and package-lock.json and installed with npm ci under .cache/.
func TestIdempotentKafkajs(t *testing.T) {
	dir := kafkajsInstall(t)
	idemRun(t, idemConfig{name: "kafkajs", n: 2, inflight: 1 << 20, mk: func(t *testing.T, c *Cluster, stream string, _ int) idemProducer {
		cmd := exec.Command("node", filepath.Join(dir, "producer.js"), strings.Join(c.KafkaAddrs(), ","), stream)
		cmd.Dir = dir
		in, err := cmd.StdinPipe()
		require.NoError(t, err)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		p := &kafkajsProducer{cmd: cmd, in: in, waiting: map[string]func(int64, error){}, done: make(chan struct{})}
		go p.read(out)
		return p
	}}).require(t)
}

// kafkajsInstall copies the test's npm package to .cache/kafkajs and runs
// npm ci there once; it skips where Node.js or npm is missing.
func kafkajsInstall(t *testing.T) string {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the kafkajs test needs Node.js and npm", tool)
		}
	}
	dir, err := filepath.Abs(filepath.Join("..", ".cache", "kafkajs"))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	fresh := false
	for _, f := range []string{"package.json", "package-lock.json", "producer.js"} {
		b, err := os.ReadFile(filepath.Join("kafkajs", f))
		require.NoError(t, err)
		if old, err := os.ReadFile(filepath.Join(dir, f)); err != nil || string(old) != string(b) {
			fresh = true
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "kafkajs")); err != nil || fresh {
		cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "npm ci: %s", out)
	}
	return dir
}

// kafkajsProducer feeds values to producer.js and hands its answers, in
// send order, to their callbacks.
type kafkajsProducer struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	mu      sync.Mutex
	waiting map[string]func(int64, error)
	done    chan struct{}
}

func (p *kafkajsProducer) send(v string, done func(int64, error)) {
	p.mu.Lock()
	p.waiting[v] = done
	p.mu.Unlock()
	if _, err := fmt.Fprintln(p.in, v); err != nil {
		p.answer(v, -1, fmt.Errorf("kafkajs producer gone: %w", err))
	}
}

func (p *kafkajsProducer) answer(v string, off int64, err error) {
	p.mu.Lock()
	done := p.waiting[v]
	delete(p.waiting, v)
	p.mu.Unlock()
	if done != nil {
		done(off, err)
	}
}

func (p *kafkajsProducer) read(r io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		kind, rest, _ := strings.Cut(sc.Text(), " ")
		v, arg, _ := strings.Cut(rest, " ")
		switch kind {
		case "ok":
			off, err := strconv.ParseInt(arg, 10, 64)
			p.answer(v, off, err)
		case "err":
			p.answer(v, -1, fmt.Errorf("kafkajs: %s", arg))
		}
	}
	p.mu.Lock()
	left := p.waiting
	p.waiting = map[string]func(int64, error){}
	p.mu.Unlock()
	for _, done := range left {
		done(-1, fmt.Errorf("kafkajs producer exited"))
	}
}

func (p *kafkajsProducer) close(ctx context.Context) {
	_ = p.in.Close()
	select {
	case <-p.done:
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = p.cmd.Wait()
}
