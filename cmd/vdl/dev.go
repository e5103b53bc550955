package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/internal/pki"
	"github.com/vdl-project/vdl/internal/users"
	"github.com/vdl-project/vdl/server"
)

func devCmd() *cobra.Command {
	var dir, profile string
	var basePort, dcs int
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local cluster: 3 config servers, 3 servers, a stream \"demo\" (Ctrl-C stops it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dcs < 0 || dcs > 3 {
				return fmt.Errorf("--dcs %d: want 0 (no DC labels) to 3", dcs)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDev(ctx, dir, profile, basePort, dcs)
		},
	}
	cmd.Flags().IntVar(&dcs, "dcs", 0, "label the servers with this many DCs (dc1, dc2, ...; 3: one server per DC)")
	cmd.Flags().StringVar(&dir, "dir", "data/dev", "directory for the servers' data, configs and logs")
	cmd.Flags().StringVar(&profile, "profile", "modern", "Kafka protocol profile: modern or kafka-0.10")
	cmd.Flags().IntVar(&basePort, "port", 9092, "Kafka port of node 1 (nodes 2 and 3 use the next two); raft uses port+1000.., admin port+100.., "+
		"the config servers' API port+300.. and raft port+1300..")
	return cmd
}

type devNode struct {
	id                           int
	kafka, kafkaTLS, raft, admin string
	dc                           string
	csAPI, csRaft                string // the config server of the same number
}

func runDev(ctx context.Context, dir, profile string, base, dcs int) error {
	var nodes []devNode
	for i := 0; i < 3; i++ {
		n := devNode{
			id:       i + 1,
			kafka:    fmt.Sprintf("127.0.0.1:%d", base+i),
			kafkaTLS: fmt.Sprintf("127.0.0.1:%d", base+200+i),
			raft:     fmt.Sprintf("127.0.0.1:%d", base+1000+i),
			admin:    fmt.Sprintf("127.0.0.1:%d", base+100+i),
			csAPI:    fmt.Sprintf("127.0.0.1:%d", base+300+i),
			csRaft:   fmt.Sprintf("127.0.0.1:%d", base+1300+i),
		}
		if dcs > 0 {
			n.dc = fmt.Sprintf("dc%d", i%dcs+1)
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		for _, addr := range []string{n.kafka, n.kafkaTLS, n.raft, n.admin, n.csAPI, n.csRaft} {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("port %s is busy (%v); pick other ports with --port", addr, err)
			}
			ln.Close()
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	// The dev cluster runs secured like production (docs/security.md):
	// peers on mutual TLS, the admin API on HTTPS with a token.
	certs := filepath.Join(dir, "certs")
	if err := pki.EnsureDir(certs, "vdl-dev", []uint64{1, 2, 3}, []uint64{1, 2, 3}, []string{"127.0.0.1", "localhost"}, []string{"admin"}); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	tokenFile := filepath.Join(certs, "admin.token")
	if _, err := pki.EnsureToken(tokenFile); err != nil {
		return err
	}
	// A Kafka user for the TLS listener (SASL), its password in a file.
	passwordFile := filepath.Join(certs, "dev.password")
	if err := ensureDevUser(filepath.Join(certs, "users.toml"), passwordFile); err != nil {
		return err
	}
	status, err := devClient(filepath.Join(certs, "ca.crt"))
	if err != nil {
		return err
	}
	sup := &supervisor{ctx: ctx}
	defer sup.stop()
	for _, n := range nodes {
		cfgPath := filepath.Join(dir, fmt.Sprintf("config%d.toml", n.id))
		if err := os.WriteFile(cfgPath, []byte(devConfigServerConfig(n, nodes, dir, certs)), 0o644); err != nil {
			return err
		}
		logPath := filepath.Join(dir, fmt.Sprintf("config%d.log", n.id))
		if err := sup.start(100+n.id, logPath, exe, "configserver", "--config", cfgPath); err != nil {
			return err
		}
	}
	for _, n := range nodes {
		cfgPath := filepath.Join(dir, fmt.Sprintf("node%d.toml", n.id))
		if err := os.WriteFile(cfgPath, []byte(devConfig(n, nodes, dir, profile, certs)), 0o644); err != nil {
			return err
		}
		logPath := filepath.Join(dir, fmt.Sprintf("node%d.log", n.id))
		if err := sup.start(n.id, logPath, exe, "server", "--config", cfgPath); err != nil {
			return err
		}
	}
	if err := createDevStream(ctx, nodes, certs, "demo"); err != nil {
		return fmt.Errorf("%w (logs are in %s)", err, dir)
	}
	leader, err := waitDevLeader(ctx, status, nodes, "demo", 60*time.Second)
	if err == nil {
		// Groups and idempotent producers (franz-go's default) need it.
		_, err = waitDevLeader(ctx, status, nodes, "__consumer_offsets", 60*time.Second)
	}
	if err != nil {
		return fmt.Errorf("%w (server logs are in %s)", err, dir)
	}
	var brokers, tlsBrokers []string
	for _, n := range nodes {
		brokers = append(brokers, n.kafka)
		tlsBrokers = append(tlsBrokers, n.kafkaTLS)
	}
	b := strings.Join(brokers, ",")
	fmt.Printf(`VDL dev cluster is up: 3 config servers, 3 servers, stream "demo" (leader: node %d), profile %s.

Produce and consume with vdlctl (built by make run):
  echo hello | bin/vdlctl produce -b %s -t demo
  bin/vdlctl consume -b %s -t demo --from-beginning --exit

Or with kcat (Debian package kcat):
  echo hello | kcat -P -b %s -t demo
  kcat -C -b %[10]s -t demo -o beginning -e

The same over TLS with SASL/SCRAM, as production runs (user "dev"):
  echo hello | bin/vdlctl produce -b %[9]s -t demo --tls --kafka-ca %[6]s/ca.crt --user dev --password-file %[6]s/dev.password
  kcat -C -b %[9]s -t demo -o beginning -e -X security.protocol=SASL_SSL -X ssl.ca.location=%[6]s/ca.crt \
       -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=dev -X sasl.password=$(cat %[6]s/dev.password)
  (more users: vdl user add --file %[6]s/users.toml --name NAME --password-file FILE)

The admin API and the config servers' API are HTTPS; changes need the admin
token. For vdlctl in this shell:
  export VDL_CA=%[6]s/ca.crt VDL_ADMIN_TOKEN_FILE=%[6]s/admin.token VDL_CONFIG_SERVERS=%[11]s
  bin/vdlctl cluster status
  bin/vdlctl stream create orders          # or CreateTopics from any Kafka admin client
  bin/vdlctl stream list
  bin/vdlctl status
  curl -s --cacert %[6]s/ca.crt https://%[7]s/status

Logs and data: %[8]s
Ctrl-C stops the cluster (data is kept; rm -rf %[8]s starts afresh).
`, leader, profile, b, b, b, certs, nodes[0].admin, dir, strings.Join(tlsBrokers, ","), b, devConfigServers(nodes))
	<-ctx.Done()
	fmt.Println("\nstopping...")
	return nil
}

func devConfigServers(nodes []devNode) string {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.csAPI)
	}
	return strings.Join(addrs, ",")
}

// devConfigServerConfig is config server n's TOML.
func devConfigServerConfig(n devNode, nodes []devNode, dir, certs string) string {
	abs := absIn(certs)
	var sb strings.Builder
	fmt.Fprintf(&sb, "id = %d\ncluster_id = \"vdl-dev\"\ndata_dir = %q\nraft_listen = %q\napi_listen = %q\n", n.id,
		filepath.Join(dir, fmt.Sprintf("config%d", n.id)), n.csRaft, n.csAPI)
	fmt.Fprintf(&sb, "ca_file = %q\ncert_file = %q\nkey_file = %q\ntoken_file = %q\n\n", abs("ca.crt"),
		abs(fmt.Sprintf("config%d.crt", n.id)), abs(fmt.Sprintf("config%d.key", n.id)), abs("admin.token"))
	for _, p := range nodes {
		fmt.Fprintf(&sb, "[[peers]]\nid = %d\nraft = %q\napi = %q\n\n", p.id, p.csRaft, p.csAPI)
	}
	return sb.String()
}

func absIn(dir string) func(string) string {
	return func(f string) string {
		p, _ := filepath.Abs(filepath.Join(dir, f))
		return p
	}
}

// devConfig is server n's TOML: it knows the config servers and itself;
// its peers and streams come from the config servers.
func devConfig(n devNode, nodes []devNode, dir, profile, certs string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "node_id = %d\ncluster_id = \"vdl-dev\"\ndata_dir = %q\nprofile = %q\n", n.id, filepath.Join(dir, fmt.Sprintf("node%d", n.id)), profile)
	fmt.Fprintf(&sb, "kafka_listen = %q\nkafka_tls_listen = %q\nraft_listen = %q\nadmin_listen = %q\n", n.kafka, n.kafkaTLS, n.raft, n.admin)
	if n.dc != "" {
		fmt.Fprintf(&sb, "dc = %q\n", n.dc)
	}
	fmt.Fprintf(&sb, "config_servers = [%q, %q, %q]\n\n", nodes[0].csAPI, nodes[1].csAPI, nodes[2].csAPI)
	abs := absIn(certs)
	fmt.Fprintf(&sb, "[tls]\nca_file = %q\ncert_file = %q\nkey_file = %q\n\n", abs("ca.crt"),
		abs(fmt.Sprintf("node%d.crt", n.id)), abs(fmt.Sprintf("node%d.key", n.id)))
	fmt.Fprintf(&sb, "[admin]\ntoken_file = %q\n\n", abs("admin.token"))
	fmt.Fprintf(&sb, "[sasl]\nusers_file = %q\n\n", abs("users.toml"))
	return sb.String()
}

// createDevStream creates the stream through the config servers (once the
// servers registered), unless it exists.
func createDevStream(ctx context.Context, nodes []devNode, certs, name string) error {
	pool, err := pki.Pool(filepath.Join(certs, "ca.crt"))
	if err != nil {
		return err
	}
	token, err := pki.EnsureToken(filepath.Join(certs, "admin.token"))
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: pki.Bearer{Token: token,
		Next: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}}
	cl := configserver.NewClient(strings.Split(devConfigServers(nodes), ","), true, hc)
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := cl.CreateStream(ctx, configserver.StreamSpec{Name: name})
		if err == nil || errors.Is(err, configserver.ErrExists) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("creating stream %q: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// ensureDevUser makes the users file with a user "dev" whose random
// password is in passwordFile, unless both exist.
func ensureDevUser(usersFile, passwordFile string) error {
	if _, err := os.Stat(usersFile); err == nil {
		if _, err := os.Stat(passwordFile); err == nil {
			return nil
		}
	}
	pw, err := pki.EnsureToken(passwordFile)
	if err != nil {
		return err
	}
	f, err := loadOrNew(usersFile)
	if err != nil {
		return err
	}
	if err := f.Set("dev", pw, users.DefaultIterations); err != nil {
		return err
	}
	return f.Save(usersFile)
}

// devClient reads the admin HTTPS of the dev servers.
func devClient(caFile string) (*http.Client, error) {
	pool, err := pki.Pool(caFile)
	if err != nil {
		return nil, err
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// waitDevLeader polls the servers' admin status until every one of them
// hosts the stream and knows its leader (a client may ask any server), and
// returns the leader.
func waitDevLeader(ctx context.Context, cl *http.Client, nodes []devNode, name string, timeout time.Duration) (uint64, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var leader uint64
		known := 0
		for _, n := range nodes {
			if l := devLeaderOn(cl, n, name); l != 0 {
				leader = l
				known++
			}
		}
		if known == len(nodes) {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("stream %q has no leader known to every server after %s", name, timeout)
}

// devLeaderOn is the stream's leader as node n reports it (0: unknown).
func devLeaderOn(cl *http.Client, n devNode, name string) uint64 {
	resp, err := cl.Get("https://" + n.admin + "/status")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var st struct {
		Streams []struct {
			Name   string `json:"name"`
			Leader uint64 `json:"leader"`
		} `json:"streams"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return 0
	}
	for _, s := range st.Streams {
		if s.Name == name {
			return s.Leader
		}
	}
	return 0
}

// supervisor runs the dev servers and restarts one that fail-stops (exit
// status server.ExitFailStop), as a process supervisor would in production.
type supervisor struct {
	ctx   context.Context
	mu    sync.Mutex
	procs map[int]*exec.Cmd
	wg    sync.WaitGroup
}

func (s *supervisor) start(id int, logPath, exe string, args ...string) error {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p := exec.Command(exe, args...)
	p.Stdout, p.Stderr = logf, logf
	if err := p.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start node %d: %w", id, err)
	}
	s.mu.Lock()
	if s.procs == nil {
		s.procs = map[int]*exec.Cmd{}
	}
	s.procs[id] = p
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := p.Wait()
		logf.Close()
		if s.ctx.Err() != nil {
			return
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == server.ExitFailStop {
			fmt.Printf("node %d fail-stopped (see %s); restarting it\n", id, logPath)
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if err := s.start(id, logPath, exe, args...); err != nil {
				fmt.Printf("node %d: %v\n", id, err)
			}
			return
		}
		fmt.Printf("node %d exited (%v); see %s\n", id, err, logPath)
	}()
	return nil
}

// stop ends every server and waits for them.
func (s *supervisor) stop() {
	s.mu.Lock()
	for _, p := range s.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
