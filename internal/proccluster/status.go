package proccluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/server"
)

// KafkaAddrs lists the Kafka addresses of every node (seed brokers).
func (c *Cluster) KafkaAddrs() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Kafka)
	}
	return out
}

// health answers GET /health of a node: its status code, or the error of a
// node that does not answer.
func (c *Cluster) health(id uint64) (int, error) {
	n := c.Node(id)
	resp, err := n.AdminClient.Get(n.AdminBase + "/health")
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Health is a node's GET /health status code (0: no answer). 503 means its
// log failed: it accepts no write.
func (c *Cluster) Health(id uint64) int {
	code, _ := c.health(id)
	return code
}

// Status fetches GET /status of a node.
func (c *Cluster) Status(id uint64) (server.Status, error) {
	var st server.Status
	n := c.Node(id)
	resp, err := n.AdminClient.Get(n.AdminBase + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("status: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// StreamStatus is one stream's entry in a node's /status.
func (c *Cluster) StreamStatus(id uint64, stream string) (server.StreamStatus, error) {
	st, err := c.Status(id)
	if err != nil {
		return server.StreamStatus{}, err
	}
	for _, s := range st.Streams {
		if s.Name == stream {
			return s, nil
		}
	}
	return server.StreamStatus{}, fmt.Errorf("node %d: no stream %q", id, stream)
}

// WaitHealthy waits for GET /health to answer 200.
func (c *Cluster) WaitHealthy(id uint64, timeout time.Duration) {
	c.tb.Helper()
	n := c.Node(id)
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if !n.Running() {
			c.tb.Fatalf("node %d exited while waiting for /health", id)
		}
		code, err := c.health(id)
		if err == nil {
			if code == http.StatusOK {
				return
			}
			err = fmt.Errorf("/health: %d %s", code, http.StatusText(code))
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	c.tb.Fatalf("node %d not healthy after %s: %v", id, timeout, last)
}

// WaitLeader waits until the running healthy nodes agree on the stream's
// leader, the leader reports itself as leader, and the leader's Kafka
// listener names itself as the partition leader (a leader serves only once
// it applied an entry of its own term; before, Metadata says
// LEADER_NOT_AVAILABLE).
func (c *Cluster) WaitLeader(stream string, timeout time.Duration) uint64 {
	c.tb.Helper()
	return c.WaitLeaderServing(stream, timeout, func(leader uint64) error { return c.kafkaLeaderIs(stream, leader) })
}

// WaitLeaderAmong is WaitLeader asking only the given nodes (others may be
// cut off: a wiped server its peers refuse, say).
func (c *Cluster) WaitLeaderAmong(stream string, timeout time.Duration, ids ...uint64) uint64 {
	c.tb.Helper()
	return c.waitLeader(stream, timeout, ids, func(leader uint64) error { return c.kafkaLeaderIs(stream, leader) })
}

// WaitLeaderServing is WaitLeader with another test of "serving" (a probe
// produce, where the test's assertions tolerate an extra record).
func (c *Cluster) WaitLeaderServing(stream string, timeout time.Duration, serves func(leader uint64) error) uint64 {
	c.tb.Helper()
	return c.waitLeader(stream, timeout, nil, serves)
}

func (c *Cluster) waitLeader(stream string, timeout time.Duration, ids []uint64, serves func(leader uint64) error) uint64 {
	c.tb.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		leader, reason := c.agreedLeader(stream, ids)
		if leader != 0 {
			err := serves(leader)
			if err == nil {
				return leader
			}
			reason = err.Error()
		}
		why = reason
		time.Sleep(50 * time.Millisecond)
	}
	c.tb.Fatalf("stream %q: no serving leader after %s (%s)", stream, timeout, why)
	return 0
}

// agreedLeader returns the leader that the running healthy nodes (of ids,
// if given) agree on and that calls itself leader, or 0 and why not.
func (c *Cluster) agreedLeader(stream string, ids []uint64) (uint64, string) {
	var leader uint64
	for _, n := range c.Nodes {
		if !n.Running() || c.Health(n.ID) != http.StatusOK || (ids != nil && !slices.Contains(ids, n.ID)) {
			continue
		}
		s, err := c.StreamStatus(n.ID, stream)
		if err != nil {
			return 0, err.Error()
		}
		if s.Leader == 0 {
			return 0, fmt.Sprintf("node %d sees no leader", n.ID)
		}
		if leader != 0 && s.Leader != leader {
			return 0, fmt.Sprintf("nodes disagree: %d vs %d", leader, s.Leader)
		}
		leader = s.Leader
	}
	if leader == 0 {
		return 0, "no running healthy node"
	}
	if !c.Node(leader).Running() {
		return 0, fmt.Sprintf("leader %d is not running", leader)
	}
	s, err := c.StreamStatus(leader, stream)
	if err != nil {
		return 0, err.Error()
	}
	if s.Role != "StateLeader" {
		return 0, fmt.Sprintf("node %d is %s", leader, s.Role)
	}
	return leader, ""
}

// kafkaLeaderIs asks the leader's own Kafka listener for the stream's metadata.
func (c *Cluster) kafkaLeaderIs(stream string, leader uint64) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Node(leader).Kafka))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(stream)
	req.Topics = append(req.Topics, rt)
	seeds := cl.SeedBrokers()
	if len(seeds) == 0 {
		return errors.New("no seed broker")
	}
	kr, err := seeds[0].Request(ctx, req) // this node's own view
	if err != nil {
		return err
	}
	resp := kr.(*kmsg.MetadataResponse)
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != stream {
			continue
		}
		for _, p := range t.Partitions {
			if p.Partition == 0 && p.ErrorCode == 0 && p.Leader == int32(leader) {
				return nil
			}
			return fmt.Errorf("metadata from node %d: partition leader %d error %d", leader, p.Leader, p.ErrorCode)
		}
	}
	return fmt.Errorf("metadata from node %d: no stream %q", leader, stream)
}

// RoundTrip sends one Kafka request on a new connection to addr and
// decodes the answer into resp (a test speaking the protocol itself:
// requests no client would send, or to a broker of its choosing).
func RoundTrip(addr string, req kmsg.Request, resp kmsg.Response, timeout time.Duration) error {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(timeout))
	b := make([]byte, 4, 64)
	b = binary.BigEndian.AppendUint16(b, uint16(req.Key()))
	b = binary.BigEndian.AppendUint16(b, uint16(req.GetVersion()))
	b = binary.BigEndian.AppendUint32(b, 1) // correlation id
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, "test"...)
	if req.IsFlexible() {
		b = append(b, 0)
	}
	b = req.AppendTo(b)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	if _, err := nc.Write(b); err != nil {
		return err
	}
	var n [4]byte
	if _, err := io.ReadFull(nc, n[:]); err != nil {
		return err
	}
	frame := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(nc, frame); err != nil {
		return err
	}
	if corr := binary.BigEndian.Uint32(frame); corr != 1 {
		return fmt.Errorf("correlation id %d, want 1", corr)
	}
	body := frame[4:]
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() {
		body = body[1:] // empty tagged fields of response header v1
	}
	return resp.ReadFrom(body)
}
