package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/batchfmt"
	"github.com/vdl-project/vdl/raftnode"
	"github.com/vdl-project/vdl/storage"
)

// Stream configs through the Kafka admin API (DescribeConfigs,
// AlterConfigs, IncrementalAlterConfigs). A stream's config is its TOML
// StreamConfig (the defaults) with overrides kept as replicated state: a
// config command (raftnode.ConfigData) goes through the stream's Raft
// group, every replica applies it at the same log position into its log's
// meta file (storage.Log.ApplyConfig), which outlives the command itself
// (retention) and travels with snapshots. The overrides take effect where
// the server reads them: retention (EffectivePolicy), max.message.bytes on
// produce, preferred.dc in leader placement (applyPreferredDC). Kafka clients may send an alter to any broker: a follower
// forwards the command to the stream's leader over the peers' HTTP.

// effectiveConfig is a stream's config: TOML defaults, then overrides.
type effectiveConfig struct {
	sc        StreamConfig
	overrides map[string]string
}

// value returns a config's value and whether it is an override.
func (e effectiveConfig) value(name string) (string, bool) {
	if v, ok := e.overrides[name]; ok {
		return v, true
	}
	switch name {
	case kafka.ConfigRetentionMs:
		return strconv.FormatInt(e.sc.RetentionMs, 10), false
	case kafka.ConfigRetentionBytes:
		return strconv.FormatInt(e.sc.RetentionBytes, 10), false
	case kafka.ConfigCleanupPolicy:
		return "delete", false
	case kafka.ConfigMaxMessage:
		return strconv.Itoa(kafka.DefaultMaxMessageBytes), false
	}
	return "", false
}

func (e effectiveConfig) int64Of(name string) int64 {
	v, _ := e.value(name)
	n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n
}

// EffectivePolicy is a stream's retention policy with its replicated
// overrides (retention.ms, retention.bytes) applied.
func EffectivePolicy(sc StreamConfig, l *storage.Log) storage.RetentionPolicy {
	e := effectiveConfig{sc: sc, overrides: l.Config()}
	return storage.RetentionPolicy{MaxAge: e.int64Of(kafka.ConfigRetentionMs), MaxBytes: e.int64Of(kafka.ConfigRetentionBytes)}
}

// entries are a stream's configs: overrides over the TOML defaults.
func entries(sc StreamConfig, overrides map[string]string) []kafka.ConfigEntry {
	e := effectiveConfig{sc: sc, overrides: overrides}
	var out []kafka.ConfigEntry
	for _, n := range kafka.StreamConfigNames {
		v, over := e.value(n)
		src := kafka.ConfigDefault
		if over {
			src = kafka.ConfigOverride
		}
		out = append(out, kafka.ConfigEntry{Name: n, Value: v, Source: src})
	}
	return out
}

// DescribeStreamConfig answers from the leader's replica: a follower asks
// the leader (whose alters are applied to its storage before they are
// acknowledged, see AlterStreamConfig), so an acknowledged alter is always
// seen. Without a forwarder (the simulator) a replica answers itself.
func (b *Backend) DescribeStreamConfig(name string, done func([]kafka.ConfigEntry, error)) {
	ref, ok := b.c.Stream(name)
	switch {
	case !ok:
		done(nil, kafka.ErrUnknownStream)
		return
	case ref.Log == nil:
		done(nil, fmt.Errorf("%w: the stream is not hosted on this server", kafka.ErrNotLeader))
		return
	}
	v, _ := b.r.View(ref.Group)
	f, forward := b.c.(configForwarder)
	switch {
	case !forward || v.Leader == b.r.ID():
		done(entries(ref.Defaults, ref.Log.Config()), nil)
	case v.Leader == 0:
		done(nil, kafka.ErrNoLeader)
	default:
		go func() {
			over, err := f.LeaderConfig(v.Leader, ref.Group)
			if err != nil {
				done(nil, err)
				return
			}
			done(entries(ref.Defaults, over), nil)
		}()
	}
}

// configForwarder forwards a config command to a stream's leader (the
// server's catalog does, over the peers' HTTP; the simulator's does not).
type configForwarder interface {
	ForwardConfig(leader, group uint64, data []byte) error
	LeaderConfig(leader, group uint64) (map[string]string, error)
}

// brokerConfigSource lists a server's read-only broker configs.
type brokerConfigSource interface {
	BrokerConfigs() []kafka.ConfigEntry
}

// AlterStreamConfig proposes the config command on the leader, or forwards
// it there from a follower.
func (b *Backend) AlterStreamConfig(name string, reset bool, changes []kafka.ConfigChange, done func(error)) {
	ref, ok := b.c.Stream(name)
	switch {
	case !ok:
		done(kafka.ErrUnknownStream)
		return
	case ref.Log == nil:
		done(fmt.Errorf("%w: the stream is not hosted on this server", kafka.ErrNotLeader))
		return
	}
	ops := make([]storage.ConfigOp, len(changes))
	for i, c := range changes {
		ops[i] = storage.ConfigOp{Key: c.Key, Value: c.Value, Delete: c.Delete}
	}
	data := raftnode.ConfigData(reset, ops)
	v, _ := b.r.View(ref.Group)
	if v.Leader != 0 && v.Leader != b.r.ID() {
		f, ok := b.c.(configForwarder)
		if !ok {
			done(kafka.ErrNotLeader)
			return
		}
		go func() { done(f.ForwardConfig(v.Leader, ref.Group, data)) }()
		return
	}
	_, production := b.c.(configForwarder)
	err := b.r.ProposeFunc(ref.Group, data, func(r raftnode.Result, err error) {
		if err != nil || !production {
			done(kafkaError(err))
			return
		}
		// Committed and applied by the core; the log applies it in its
		// pipeline a moment later. Answer once it has, so a describe
		// (answered by the leader from its log) sees it.
		go func() { done(waitConfigApplied(ref.Log, r.Index)) }()
	})
	if err != nil {
		done(kafkaError(err))
	}
}

// waitConfigApplied waits (up to 5 s) until the log has applied the config
// command at index.
func waitConfigApplied(l *storage.Log, index uint64) error {
	deadline := time.Now().Add(5 * time.Second)
	for l.ConfigIndex() < index {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the config change committed but was not applied within 5 s", kafka.ErrTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// applyPreferredDC moves the leadership of each stream this server leads
// toward its preferred.dc override, checked with retention (every
// retention_check_ms): a leader outside that DC hands leadership to an
// in-sync voter inside it (the lowest id), if there is one. A leader in the
// preferred DC, or a DC with no in-sync replica, changes nothing.
func (s *Server) applyPreferredDC() {
	s.mu.Lock()
	var hosted []*stream
	for _, st := range s.streams {
		hosted = append(hosted, st)
	}
	s.mu.Unlock()
	for _, st := range hosted {
		dc := st.log.Config()[kafka.ConfigPreferredDC]
		if dc == "" || dc == s.cfg.DC || !s.host.Readable(st.cfg.ID) {
			continue
		}
		gs, ok := s.host.Status(st.cfg.ID)
		if !ok {
			continue
		}
		for _, id := range slices.Sorted(slices.Values(gs.InSync)) {
			if p, ok := s.dir.Peer(id); ok && id != s.cfg.NodeID && p.DC == dc && slices.Contains(gs.Voters, id) {
				if err := s.host.TransferLeader(st.cfg.ID, id); err != nil {
					s.log.Warn("preferred.dc: leadership transfer failed", "stream", st.cfg.Name, "to", id, "err", err)
				} else {
					s.log.Info("preferred.dc: handing leadership over", "stream", st.cfg.Name, "dc", dc, "to", id)
				}
				break
			}
		}
	}
}

// checkMaxMessage refuses a batch larger than the stream's
// max.message.bytes override (the front end already applied the server's
// own limit): MESSAGE_TOO_LARGE, nothing written.
func checkMaxMessage(l *storage.Log, batches []byte) error {
	v, ok := l.Config()[kafka.ConfigMaxMessage]
	if !ok {
		return nil
	}
	limit, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return nil
	}
	for p := 0; p+batchfmt.HeaderSize <= len(batches); {
		n := batchfmt.LengthOverhead + int(batchfmt.BatchLength(batches[p:]))
		if int64(n) > limit {
			return fmt.Errorf("%w: a %d-byte batch, the stream's max.message.bytes is %d", kafka.ErrTooLarge, n, limit)
		}
		p += n
	}
	return nil
}

// BrokerConfigs lists the server's read-only broker configs.
func (b *Backend) BrokerConfigs() []kafka.ConfigEntry {
	if s, ok := b.c.(brokerConfigSource); ok {
		return s.BrokerConfigs()
	}
	return []kafka.ConfigEntry{{Name: "broker.id", Value: strconv.FormatUint(b.r.ID(), 10), Source: kafka.ConfigStatic}}
}

// BrokerConfigs are a few of the server's settings under Kafka's names.
func (c catalog) BrokerConfigs() []kafka.ConfigEntry {
	cfg := c.s.cfg
	static := func(n, v string) kafka.ConfigEntry {
		return kafka.ConfigEntry{Name: n, Value: v, Source: kafka.ConfigStatic}
	}
	return []kafka.ConfigEntry{
		static("broker.id", strconv.FormatUint(cfg.NodeID, 10)),
		static("broker.rack", cfg.DC),
		static("auto.create.topics.enable", "false"),
		static("log.segment.bytes", strconv.FormatInt(cfg.Storage.SegmentBytes, 10)),
		static("message.max.bytes", strconv.Itoa(kafka.DefaultMaxMessageBytes)),
		static("num.partitions", "1"),
		static("default.replication.factor", strconv.Itoa(len(cfg.Peers))),
	}
}

// ForwardConfig posts a config command to the stream's leader and waits
// for its commit there.
func (c catalog) ForwardConfig(leader, group uint64, data []byte) error {
	s := c.s
	ctx, cancel := context.WithTimeout(s.ctx, 20*time.Second)
	defer cancel()
	u := s.peerURL(leader, fmt.Sprintf("/internal/raft/%d/config", group))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(string(data)))
	if err != nil {
		return err
	}
	resp, err := s.peerClient.Do(req)
	if err != nil {
		return fmt.Errorf("%w: forwarding the config change to node %d: %v", kafka.ErrNoLeader, leader, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusMisdirectedRequest:
		return fmt.Errorf("%w: node %d: %s", kafka.ErrNotLeader, leader, msg)
	}
	return fmt.Errorf("forwarding the config change to node %d: %s: %s", leader, resp.Status, msg)
}

// maxConfigCommandBytes bounds a forwarded config command.
const maxConfigCommandBytes = 64 << 10

// handleConfig proposes a config command a peer forwarded (it was a
// follower of the stream): 200 after the commit, 421 when this server is
// not the leader either.
func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) {
	group, err := strconv.ParseUint(r.PathValue("group"), 10, 64)
	if err != nil {
		http.Error(w, "bad group", http.StatusBadRequest)
		return
	}
	data, err := io.ReadAll(io.LimitReader(r.Body, maxConfigCommandBytes+1))
	if err != nil || len(data) > maxConfigCommandBytes {
		http.Error(w, "config command unreadable or too large", http.StatusBadRequest)
		return
	}
	if cmd, err := raftnode.DecodeCommand(data); err != nil || cmd.Kind != raftnode.CmdConfig {
		http.Error(w, fmt.Sprintf("not a config command: %v", err), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	st, ok := s.byGroup[group]
	s.mu.Unlock()
	if !ok || !s.host.Readable(group) {
		http.Error(w, fmt.Sprintf("node %d does not lead group %d", s.cfg.NodeID, group), http.StatusMisdirectedRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	res, err := s.host.Propose(ctx, group, data)
	if err == nil {
		err = waitConfigApplied(st.log, res.Index)
	}
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, raftnode.ErrNotLeader) {
			code = http.StatusMisdirectedRequest
		}
		http.Error(w, err.Error(), code)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// handleLeaderConfig answers a follower's DescribeConfigs: the stream's
// config overrides as this leader's log has them (JSON), or 421 when this
// server does not lead the stream.
func (s *Server) handleLeaderConfig(w http.ResponseWriter, r *http.Request) {
	group, err := strconv.ParseUint(r.PathValue("group"), 10, 64)
	if err != nil {
		http.Error(w, "bad group", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	st, ok := s.byGroup[group]
	s.mu.Unlock()
	if !ok || !s.host.Readable(group) {
		http.Error(w, fmt.Sprintf("node %d does not lead group %d", s.cfg.NodeID, group), http.StatusMisdirectedRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st.log.Config())
}

// LeaderConfig asks the stream's leader for its config overrides.
func (c catalog) LeaderConfig(leader, group uint64) (map[string]string, error) {
	s := c.s
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	u := s.peerURL(leader, fmt.Sprintf("/internal/raft/%d/config", group))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.peerClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: asking node %d for the config: %v", kafka.ErrNoLeader, leader, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxConfigCommandBytes))
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusMisdirectedRequest:
		return nil, fmt.Errorf("%w: node %d: %s", kafka.ErrNotLeader, leader, body)
	default:
		return nil, fmt.Errorf("asking node %d for the config: %s: %s", leader, resp.Status, body)
	}
	var over map[string]string
	if err := json.Unmarshal(body, &over); err != nil {
		return nil, fmt.Errorf("node %d's config: %w", leader, err)
	}
	return over, nil
}
