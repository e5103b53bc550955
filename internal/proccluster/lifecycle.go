package proccluster

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"
)

// A node's process as a test ends, pauses and restarts it: kill -9,
// SIGSTOP/SIGCONT, power loss, restarts, waiting for an exit.

// Kill sends SIGKILL to a node and waits for the process to be gone.
func (c *Cluster) Kill(id uint64) {
	c.tb.Helper()
	cmd, exited, _ := c.Node(id).expectExit()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
	c.tb.Logf("killed node %d (kill -9)", id)
}

// Pause stops a node's process with SIGSTOP (a process stalled by the OS, a
// long GC, a VM migration): it keeps its sockets and state, and answers
// nothing until Resume.
func (c *Cluster) Pause(id uint64) { c.signal(id, syscall.SIGSTOP, "paused") }

// Resume continues a paused node (SIGCONT).
func (c *Cluster) Resume(id uint64) { c.signal(id, syscall.SIGCONT, "resumed") }

func (c *Cluster) signal(id uint64, sig syscall.Signal, what string) {
	c.tb.Helper()
	n := c.Node(id)
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd != nil && n.Running() {
		_ = cmd.Process.Signal(sig)
		c.tb.Logf("%s node %d (%v)", what, id, sig)
	}
}

// PowerLoss cuts a node's power (a failpoint build: POST /debug/power-loss):
// it loses what it never synced and dies; this waits until it is gone.
func (c *Cluster) PowerLoss(id uint64) {
	c.tb.Helper()
	n := c.Node(id)
	cmd, exited, _ := n.expectExit()
	if cmd == nil {
		return
	}
	resp, err := n.AdminClient.Post(n.AdminBase+"/debug/power-loss", "application/json", nil)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		c.tb.Fatalf("node %d still runs 10s after its power was cut (%v)", id, err)
	}
	c.tb.Logf("cut node %d's power", id)
}

// Durability returns what a failpoint-build node found lost, after a power
// loss, of what it had reported durable (GET /debug/durability).
func (c *Cluster) Durability(id uint64) ([]string, error) {
	n := c.Node(id)
	resp, err := n.AdminClient.Get(n.AdminBase + "/debug/durability")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		Violations []string `json:"violations"`
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /debug/durability: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out.Violations, err
}

// Restart starts a stopped, killed or crashed node again on the same config
// and data dir and waits for its health.
func (c *Cluster) Restart(id uint64) {
	c.tb.Helper()
	if c.Node(id).Running() {
		c.tb.Fatalf("node %d is running", id)
	}
	c.StartNode(id)
	c.WaitHealthy(id, c.opts.StartTimeout)
	c.tb.Logf("restarted node %d", id)
}

// WaitExit waits for a node's process to end by itself (a crash or a
// refused start the test caused) and returns its wait error, for the test
// to judge: the exit is not reported as unexpected.
func (c *Cluster) WaitExit(id uint64, timeout time.Duration) error {
	c.tb.Helper()
	n := c.Node(id)
	_, exited, start := n.expectExit()
	select {
	case <-exited:
	case <-time.After(timeout):
		c.tb.Fatalf("node %d did not exit within %s", id, timeout)
	}
	// It may have ended before the test asked.
	c.mu.Lock()
	c.unexpected = slices.DeleteFunc(c.unexpected, func(e exit) bool { return e.id == id && e.start == start })
	c.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.waitErr
}

// stop ends a node with SIGTERM (graceful), SIGKILL after a grace period; a
// node that needs the SIGKILL is reported as a hang.
func (c *Cluster) stop(n *Node) {
	cmd, exited, _ := n.expectExit()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		c.tb.Errorf("node %d did not stop within 15s of SIGTERM (hang); killing it", n.ID)
		_ = cmd.Process.Kill()
		<-exited
	}
}

// StopAll stops every server (SIGTERM), in parallel; the config servers
// run on until the end.
func (c *Cluster) StopAll() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(func() { c.stop(n) })
	}
	wg.Wait()
}

// stopConfigServers stops the config servers (SIGTERM), at the end.
func (c *Cluster) stopConfigServers() {
	var wg sync.WaitGroup
	for _, n := range c.ConfigServers {
		wg.Go(func() { c.stop(n) })
	}
	wg.Wait()
}

// RestartAll stops every node gracefully (SIGTERM), rewrites the configs
// with profile (empty: unchanged), starts them all again on the same data
// dirs and waits for health and serving leaders.
func (c *Cluster) RestartAll(profile string) {
	c.tb.Helper()
	c.StopAll()
	if profile != "" {
		c.opts.Profile = profile
	}
	c.writeConfigs()
	c.startAll()
	c.tb.Logf("restarted every node (profile %s)", c.opts.Profile)
}
