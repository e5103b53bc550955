package proccluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/vdl-project/vdl/configserver"
)

// Config servers (Options.ConfigServers): the control plane as `vdl dev`
// runs it — config server processes (`vdl configserver`) started first,
// the servers registering with them (config_servers, a dc label each, no
// peers or streams in their configs), the streams created through them
// (with a preferred DC each, if given) once the servers are healthy. A
// config server is a Node of Cluster.ConfigServers with ID
// ConfigServerID(k): Kill, Restart, Node, Running and Options.Wrap take
// that id; its Admin is its API address.

// ConfigServerID is the node id of config server k (1-based).
func ConfigServerID(k int) uint64 { return uint64(100 + k) }

// isConfigServer says whether a node id names a config server.
func isConfigServer(id uint64) bool { return id > 100 }

// addConfigServers makes the config servers' nodes on ports (two each).
func (c *Cluster) addConfigServers(ports []int, host func(k int) string) {
	admin, err := c.adminHTTP()
	if err != nil {
		c.tb.Fatal(err)
	}
	for k := 1; k <= c.opts.ConfigServers; k++ {
		h := host(k)
		api := net.JoinHostPort(h, strconv.Itoa(ports[2*(k-1)]))
		c.ConfigServers = append(c.ConfigServers, &Node{
			ID:          ConfigServerID(k),
			Raft:        net.JoinHostPort(h, strconv.Itoa(ports[2*(k-1)+1])),
			Admin:       api,
			ConfigPath:  filepath.Join(c.Dir, fmt.Sprintf("config%d.toml", k)),
			DataDir:     filepath.Join(c.Dir, fmt.Sprintf("config%d", k)),
			LogPath:     filepath.Join(c.Dir, fmt.Sprintf("config%d.log", k)),
			AdminBase:   "https://" + api,
			AdminClient: admin,
		})
	}
}

// configServerConfig is config server n's TOML.
func (c *Cluster) configServerConfig(n *Node) string {
	k := n.ID - 100
	cert := func(f string) string { return filepath.Join(c.Certs, f) }
	var sb strings.Builder
	fmt.Fprintf(&sb, "id = %d\ncluster_id = \"vdl-test\"\ndata_dir = %q\nraft_listen = %q\napi_listen = %q\n", k, n.DataDir, n.Raft, n.Admin)
	fmt.Fprintf(&sb, "ca_file = %q\ncert_file = %q\nkey_file = %q\ntoken_file = %q\n", cert("ca.crt"),
		cert(fmt.Sprintf("config%d.crt", k)), cert(fmt.Sprintf("config%d.key", k)), cert("admin.token"))
	if c.opts.BalanceAfterMillis > 0 {
		fmt.Fprintf(&sb, "balance_after_ms = %d\n", c.opts.BalanceAfterMillis)
	}
	sb.WriteString("\n")
	for _, p := range c.ConfigServers {
		fmt.Fprintf(&sb, "[[peers]]\nid = %d\nraft = %q\napi = %q\n\n", p.ID-100, p.Raft, p.Admin)
	}
	return sb.String()
}

// controlledConfig is the part of a server's TOML that names the config
// servers and its DC.
func (c *Cluster) controlledConfig(n *Node) string {
	var sb strings.Builder
	if i := int(n.ID) - 1; i < len(c.opts.DCs) && c.opts.DCs[i] != "" {
		fmt.Fprintf(&sb, "dc = %q\n", c.opts.DCs[i])
	}
	fmt.Fprintf(&sb, "config_servers = [%s]\n", strings.Join(quoted(c.ConfigServerAddrs()), ", "))
	return sb.String()
}

func quoted(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.Quote(x)
	}
	return out
}

// ConfigServerAddrs are the config servers' API addresses.
func (c *Cluster) ConfigServerAddrs() []string {
	var out []string
	for _, n := range c.ConfigServers {
		out = append(out, n.Admin)
	}
	return out
}

// ConfigClient is a client of the config servers (the operator's token).
func (c *Cluster) ConfigClient() *configserver.Client {
	return configserver.NewClient(c.ConfigServerAddrs(), true, c.ConfigServers[0].AdminClient)
}

// createStreams creates the streams through the config servers (those
// that exist already are left alone), in order (stream i gets group i+1),
// each with its preferred DC.
func (c *Cluster) createStreams() {
	c.tb.Helper()
	cl := c.ConfigClient()
	rf := 3
	if len(c.Nodes) >= 5 {
		rf = 5
	}
	for i, s := range c.opts.Streams {
		spec := configserver.StreamSpec{Name: s, ReplicationFactor: rf}
		if i < len(c.opts.PreferredDCs) {
			spec.PreferredDC = c.opts.PreferredDCs[i]
		}
		var last error
		deadline := time.Now().Add(c.opts.StartTimeout)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cl.CreateStream(ctx, spec)
			cancel()
			if err == nil || errors.Is(err, configserver.ErrExists) {
				break
			}
			last = err
			if time.Now().After(deadline) {
				c.tb.Fatalf("create stream %s through the config servers: %v", s, last)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// ConfigServerLeader is the config server whose API answers as the
// leader (0: none answers so).
func (c *Cluster) ConfigServerLeader() uint64 {
	for _, n := range c.ConfigServers {
		if !n.Running() {
			continue
		}
		hc := *n.AdminClient
		hc.Timeout = 2 * time.Second
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		resp, err := hc.Get(n.AdminBase + "/v1/cluster")
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return n.ID
		}
	}
	return 0
}

// startConfigServers starts every config server and waits for their
// APIs' /health.
func (c *Cluster) startConfigServers() {
	c.tb.Helper()
	for _, n := range c.ConfigServers {
		if n.Running() {
			continue // RestartAll restarts the servers only
		}
		if err := os.WriteFile(n.ConfigPath, []byte(c.configServerConfig(n)), 0o644); err != nil {
			c.tb.Fatal(err)
		}
		c.StartNode(n.ID)
	}
	for _, n := range c.ConfigServers {
		c.WaitHealthy(n.ID, c.opts.StartTimeout)
	}
}
