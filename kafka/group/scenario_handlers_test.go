package group

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// join NAME [group=g] [session=10s] [rebalance=30s] [protocol=range]
// [id=MEMBER-ID] [instance=ID]: a JoinGroup; a member's first join has no
// member id unless id= forces one; instance= makes it a static member
// (group.instance.id; a restarted process is a new NAME with the same
// instance).
func (s *scenario) join(t *testing.T, d *datadriven.TestData) string {
	name := memberName(t, d)
	protocol := "range"
	if d.HasArg("protocol") {
		d.ScanArgs(t, "protocol", &protocol)
	}
	id := s.ids[name]
	if d.HasArg("id") {
		d.ScanArgs(t, "id", &id)
	}
	w := s.c.Join(s.now, JoinRequest{
		Group:            groupArg(t, d),
		MemberID:         id,
		ClientID:         name,
		SessionTimeout:   durationArg(t, d, "session", 10*time.Second),
		RebalanceTimeout: durationArg(t, d, "rebalance", 30*time.Second),
		ProtocolType:     "consumer",
		Protocols:        []Protocol{{Name: protocol, Metadata: []byte(name)}},
		InstanceID:       instanceArg(t, d),
	})
	return s.park(name, "join", w)
}

// sync NAME [generation=N] [assign=(a:p0+p1, b:p2)]: a SyncGroup; the leader
// gives every member's assignment.
func (s *scenario) sync(t *testing.T, d *datadriven.TestData) string {
	name := memberName(t, d)
	var as []Assignment
	for _, a := range d.CmdArgs {
		if a.Key != "assign" {
			continue
		}
		for _, v := range a.Vals {
			who, what, ok := strings.Cut(v, ":")
			if !ok {
				d.Fatalf(t, "assign=(name:assignment, ...)")
			}
			as = append(as, Assignment{MemberID: s.ids[who], Assignment: []byte(what)})
		}
	}
	if code := s.c.Fenced(groupArg(t, d), s.memberID(name), instanceArg(t, d)); code != ErrNone {
		return fmt.Sprintf("%s: sync: %s", name, errName(code))
	}
	w := s.c.Sync(s.now, groupArg(t, d), s.generationArg(t, d, name), s.memberID(name), as)
	return s.park(name, "sync", w)
}

// heartbeat NAME [generation=N] [instance=ID]
func (s *scenario) heartbeat(t *testing.T, d *datadriven.TestData) string {
	name := memberName(t, d)
	code := s.c.Fenced(groupArg(t, d), s.memberID(name), instanceArg(t, d))
	if code == ErrNone {
		code = s.c.Heartbeat(s.now, groupArg(t, d), s.generationArg(t, d, name), s.memberID(name))
	}
	return fmt.Sprintf("%s: heartbeat: %s", name, errName(code))
}

// leave NAME [instance=ID] [noid]: a LeaveGroup; with instance= it is v3+
// (LeaveMembers), noid leaves by instance id alone.
func (s *scenario) leave(t *testing.T, d *datadriven.TestData) string {
	name := memberName(t, d)
	if !d.HasArg("instance") {
		code := s.c.Leave(s.now, groupArg(t, d), s.memberID(name))
		return fmt.Sprintf("%s: leave: %s", name, errName(code))
	}
	id := s.memberID(name)
	if d.HasArg("noid") {
		id = ""
	}
	top, codes := s.c.LeaveMembers(s.now, groupArg(t, d), []LeaveMember{{MemberID: id, InstanceID: instanceArg(t, d)}})
	return fmt.Sprintf("%s: leave: %s, member %s", name, errName(top), errName(codes[0]))
}

// instanceArg is instance=ID ("" when absent: a dynamic member).
func instanceArg(t *testing.T, d *datadriven.TestData) string {
	var inst string
	if d.HasArg("instance") {
		d.ScanArgs(t, "instance", &inst)
	}
	return inst
}

// memberID is a named member's id; a name the coordinator never answered
// stands for itself (an unknown member).
func (s *scenario) memberID(name string) string {
	if id, ok := s.ids[name]; ok {
		return id
	}
	return name
}

// commit NAME topic=T partition=P offset=O [generation=N] [instance=ID]: an OffsetCommit;
// accepted commits are applied as if read back from the offsets log.
func (s *scenario) commit(t *testing.T, d *datadriven.TestData) string {
	name := memberName(t, d)
	var topic string
	var partition int
	var offset int64
	d.ScanArgs(t, "topic", &topic)
	d.ScanArgs(t, "partition", &partition)
	d.ScanArgs(t, "offset", &offset)
	g := groupArg(t, d)
	code := s.c.Fenced(g, s.memberID(name), instanceArg(t, d))
	if code == ErrNone {
		code = s.c.CheckCommit(s.now, g, s.generationArg(t, d, name), s.memberID(name))
	}
	if code == ErrNone {
		k := OffsetKey{Group: g, Topic: topic, Partition: int32(partition)}
		s.c.ApplyOffset(k, &Offset{Offset: offset, LeaderEpoch: -1, CommitTime: s.now / 1e6}, s.logOffset)
		s.logOffset++
	}
	return fmt.Sprintf("%s: commit %s/%d@%d: %s", name, topic, partition, offset, errName(code))
}

// offsets [group=g]: the committed offsets (an OffsetFetch of everything).
func (s *scenario) offsets(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	for _, o := range s.c.Offsets(groupArg(t, d)) {
		fmt.Fprintf(&b, "%s/%d: %d\n", o.Topic, o.Partition, o.Offset.Offset)
	}
	if b.Len() == 0 {
		return "no committed offsets"
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// advance DURATION: the coordinator's clock moves on; expired sessions
// and rebalance deadlines take effect.
func (s *scenario) advance(t *testing.T, d *datadriven.TestData) string {
	dur, err := time.ParseDuration(memberName(t, d))
	if err != nil {
		d.Fatalf(t, "advance DURATION: %v", err)
	}
	s.now += int64(dur)
	s.c.Advance(s.now)
	return fmt.Sprintf("now %v", time.Duration(s.now))
}

// describe [group=g]: the group as DescribeGroups shows it.
func (s *scenario) describe(t *testing.T, d *datadriven.TestData) string {
	sum := s.c.Describe(groupArg(t, d))
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s generation %d", sum.Group, sum.State, sum.Generation)
	if sum.Protocol != "" {
		fmt.Fprintf(&b, " protocol %s", sum.Protocol)
	}
	if sum.Leader != "" {
		fmt.Fprintf(&b, " leader %s", s.name(sum.Leader))
	}
	for _, m := range sum.Members {
		fmt.Fprintf(&b, "\n  %s last heartbeat %v", s.name(m.MemberID), time.Duration(m.LastHeartbeat))
		if m.InstanceID != "" {
			fmt.Fprintf(&b, " instance %s", m.InstanceID)
		}
		if sum.State == Stable {
			fmt.Fprintf(&b, " assignment %q", m.Assignment)
		}
	}
	return b.String()
}
