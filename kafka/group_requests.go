package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka/group"
)

// Helpers shared by the group and offset APIs (08–16). The semantics are
// group.Coordinator's (Kafka 2.4, dynamic membership); the handlers
// translate requests, JoinGroup and SyncGroup park until their result is
// there, and OffsetCommit waits for the Raft commit of its record batch in
// the offsets stream.
//
// The modern profile stops each group API below static membership
// (KIP-345: group.instance.id in JoinGroup 5, SyncGroup 3, Heartbeat 3,
// LeaveGroup 3, OffsetCommit 7, DescribeGroups 4), which VDL does not
// implement; FindCoordinator, OffsetFetch and ListGroups are at Kafka 2.4's
// maximum.

// errMsg is an error message for versions from from on, when there is an
// error.
func errMsg(code int16, v, from int16, msg string) *string {
	if code == errNone || v < from {
		return nil
	}
	return &msg
}

// waitOp parks a JoinGroup or SyncGroup until its waiter is done.
type waitOp struct {
	sl     *slot
	w      *group.Waiter
	answer func(*group.Waiter) kmsg.Response
	groups *Groups
}

func (op *waitOp) poll(s *Session, now int64) {
	if op.sl.done {
		return
	}
	s.groups.mu.Lock()
	s.groups.access(now) // timeouts, lost leadership
	done := op.w.Done()
	s.groups.mu.Unlock()
	if done {
		s.finish(op.sl, op.answer(op.w))
	}
}

func (op *waitOp) deadline() int64 {
	if op.sl.done {
		return 0
	}
	return op.groups.nextDeadline()
}

func (op *waitOp) waits() []<-chan struct{} {
	if op.sl.done {
		return nil
	}
	return []<-chan struct{}{op.w.Ready()}
}

func failedJoin(code int16, memberID string) *group.Waiter {
	return group.Failed(group.JoinResult{Err: code, Generation: -1, MemberID: memberID}, group.SyncResult{Err: code})
}

func (s *Session) parkGroup(sl *slot, w *group.Waiter, answer func(*group.Waiter) kmsg.Response) {
	if w.Done() {
		s.finish(sl, answer(w))
		return
	}
	sl.op = &waitOp{sl: sl, w: w, answer: answer, groups: s.groups}
}

// INVALID_GROUP_ID as Kafka does before any coordinator check).
// instanceOf is a request's group.instance.id ("" when null or absent: a
// dynamic member).
func instanceOf(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func (s *Session) groupCall(now int64, groupID string, f func() int16) int16 {
	s.groups.mu.Lock()
	defer s.groups.mu.Unlock()
	if groupID != "" {
		if code := s.groups.access(now); code != errNone {
			return code
		}
	}
	return f()
}
