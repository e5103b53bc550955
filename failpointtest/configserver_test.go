package failpointtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/configserver"
	"github.com/vdl-project/vdl/failpoints"
	"github.com/vdl-project/vdl/internal/testnet"
)

// csProcs are three `vdl configserver` processes of the failpoint build
// (plain text, no token: a test network).
type csProcs struct {
	t     *testing.T
	dir   string
	apis  []string
	cmds  []*exec.Cmd
	exits []chan struct{}
}

func startConfigServers(t *testing.T) *csProcs {
	p := &csProcs{t: t, dir: t.TempDir()}
	var peers string
	var rafts []string
	for i := 1; i <= 3; i++ {
		api, raft := testnet.FreeAddr(t), testnet.FreeAddr(t)
		p.apis, rafts = append(p.apis, api), append(rafts, raft)
		peers += fmt.Sprintf("[[peers]]\nid = %d\nraft = %q\napi = %q\n\n", i, raft, api)
	}
	for i := 1; i <= 3; i++ {
		cfg := fmt.Sprintf("id = %d\ndata_dir = %q\nraft_listen = %q\napi_listen = %q\ninsecure = true\ntick_ms = 20\n"+
			"down_after_ms = 10000\nbalance_after_ms = 300\n\n%s", i, filepath.Join(p.dir, fmt.Sprint(i)), rafts[i-1], p.apis[i-1], peers)
		require.NoError(t, os.WriteFile(filepath.Join(p.dir, fmt.Sprintf("cs%d.toml", i)), []byte(cfg), 0o644))
		p.cmds, p.exits = append(p.cmds, nil), append(p.exits, nil)
		p.start(i - 1)
	}
	t.Cleanup(func() {
		for i, c := range p.cmds {
			if c != nil && p.running(i) {
				_ = c.Process.Kill()
				<-p.exits[i]
			}
		}
	})
	return p
}

func (p *csProcs) start(i int) {
	log, err := os.OpenFile(filepath.Join(p.dir, fmt.Sprintf("cs%d.log", i+1)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(p.t, err)
	cmd := exec.Command(fpBin, "configserver", "--config", filepath.Join(p.dir, fmt.Sprintf("cs%d.toml", i+1)))
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(p.t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
	p.cmds[i], p.exits[i] = cmd, exited
}

func (p *csProcs) running(i int) bool {
	select {
	case <-p.exits[i]:
		return false
	default:
		return true
	}
}

func (p *csProcs) client() *configserver.Client { return configserver.NewClient(p.apis, false, nil) }

// leader waits until a config server leads and returns its index.
func (p *csProcs) leader() int {
	p.t.Helper()
	var idx int
	require.Eventually(p.t, func() bool {
		cs, err := p.client().Cluster(context.Background())
		if err != nil {
			return false
		}
		idx = int(cs.Leader) - 1
		return p.running(idx)
	}, 20*time.Second, 50*time.Millisecond)
	return idx
}

func (p *csProcs) fp(i int) *failpoints.Client {
	return &failpoints.Client{BaseURL: "http://" + p.apis[i], HTTP: http.DefaultClient}
}

// reportServers has three servers, one per DC, report (fake: the config
// servers only need their reports to place streams).
func (p *csProcs) reportServers(groups map[uint64][]configserver.GroupReport) {
	p.t.Helper()
	require.Eventually(p.t, func() bool {
		for id, dc := range map[uint64]string{1: "a", 2: "b", 3: "c"} {
			r := configserver.Report{Server: configserver.Server{ID: id, Kafka: "k", Raft: "r", Admin: "127.0.0.1:1", DC: dc},
				Groups: groups[id], Version: -1}
			if _, err := p.client().Report(context.Background(), r); err != nil {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond)
}

func (p *csProcs) waitExit(i int, why string) {
	p.t.Helper()
	select {
	case <-p.exits[i]:
	case <-time.After(15 * time.Second):
		p.t.Fatalf("config server %d still runs: %s", i+1, why)
	}
}

// The config servers' failpoints on real processes: a report's answer
// delayed; a crash after a create committed (the retry finds it made, once)
// and before one was proposed (it never exists); a crash before a balancer
// transfer.
func TestConfigServerFailpoints(t *testing.T) {
	p := startConfigServers(t)
	ctx := context.Background()
	l := p.leader()
	p.reportServers(nil)

	// beforeReportAnswer: sleep delays the answer.
	require.NoError(t, p.fp(l).Enable("configserver/beforeReportAnswer", "sleep(1500)"))
	start := time.Now()
	p.reportServers(nil)
	require.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond)
	info, err := p.fp(l).Get("configserver/beforeReportAnswer")
	require.NoError(t, err)
	require.Positive(t, info.Hits)
	require.NoError(t, p.fp(l).Disable("configserver/beforeReportAnswer"))
	p.reportServers(nil)

	// afterPropose: the leader dies with the create committed; the retry
	// on the next leader finds the stream, made once.
	require.NoError(t, p.fp(l).Enable("configserver/afterPropose", "return(true)"))
	_, err = p.client().CreateStream(ctx, configserver.StreamSpec{Name: "x"})
	require.Error(t, err)
	require.NotErrorIs(t, err, configserver.ErrPlacement)
	p.waitExit(l, "afterPropose=return(true)")
	l2 := p.leader()
	p.reportServers(nil)
	_, err = p.client().CreateStream(ctx, configserver.StreamSpec{Name: "x"})
	require.ErrorIs(t, err, configserver.ErrExists)
	p.start(l)

	// beforePropose: the leader dies before proposing; the stream never exists.
	require.NoError(t, p.fp(l2).Enable("configserver/beforePropose", "return(true)"))
	_, err = p.client().CreateStream(ctx, configserver.StreamSpec{Name: "y"})
	require.Error(t, err)
	require.NotErrorIs(t, err, configserver.ErrPlacement)
	p.waitExit(l2, "beforePropose=return(true)")
	p.start(l2)
	l3 := p.leader()
	p.reportServers(nil)
	_, err = p.client().Stream(ctx, "y")
	require.ErrorIs(t, err, configserver.ErrNotFound)

	// beforeTransfer: a stream whose (reported) leader is outside its
	// preferred DC, with a caught-up replica there: the balancer is about
	// to transfer, and crashes.
	st, err := p.client().CreateStream(ctx, configserver.StreamSpec{Name: "t", PreferredDC: "b"})
	require.NoError(t, err)
	require.NoError(t, p.fp(l3).Enable("configserver/beforeTransfer", "return(true)"))
	var followers []configserver.FollowerReport
	for _, id := range st.Replicas {
		if id != 1 {
			followers = append(followers, configserver.FollowerReport{ID: id, Match: 10, Active: true})
		}
	}
	leading := configserver.GroupReport{Group: st.Group, Role: "StateLeader", Leader: 1, Term: 9, Commit: 10, Voters: st.Replicas, Followers: followers}
	deadline := time.Now().Add(15 * time.Second)
	for p.running(l3) && time.Now().Before(deadline) {
		p.reportServers(map[uint64][]configserver.GroupReport{1: {leading}})
		time.Sleep(200 * time.Millisecond)
	}
	p.waitExit(l3, "beforeTransfer=return(true)")
}
