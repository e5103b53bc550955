package kafka

import "github.com/twmb/franz-go/pkg/kerr"

// Linearizable reads: before a Fetch or ListOffsets reads a stream this
// server leads, the leader confirms its leadership in a round that starts
// after the request arrived (LogView.Fence), so a leader that was cut off
// never answers with stale data.

// fenceGrace bounds how long a read waits for its read fences.
const fenceGrace = int64(2e9)

// readFences are one request's read fences: one per stream it reads that
// this server led when it arrived, kept in request order (the channels a
// driver waits on come out in a deterministic order).
type readFences struct {
	topics []string
	by     map[string]ReadFence
}

// startFences starts a fence for each stream of topics this server leads.
func (s *Session) startFences(topics []string) readFences {
	f := readFences{by: map[string]ReadFence{}}
	for _, t := range topics {
		if _, seen := f.by[t]; seen {
			continue
		}
		if view, err := s.be.Log(t); err == nil {
			f.topics = append(f.topics, t)
			f.by[t] = view.Fence()
		}
	}
	return f
}

// get returns topic's fence; nil when the stream was not led here at arrival.
func (f readFences) get(topic string) ReadFence { return f.by[topic] }

// pending returns the Done channels of the fences not yet done.
func (f readFences) pending() []<-chan struct{} {
	var chans []<-chan struct{}
	for _, t := range f.topics {
		select {
		case <-f.by[t].Done():
		default:
			chans = append(chans, f.by[t].Done())
		}
	}
	return chans
}

// fenceCode is the error code of a read behind fence: none once it passed.
func fenceCode(fence ReadFence) int16 {
	if fence == nil { // became leader after the request arrived: not confirmed
		return kerr.NotLeaderForPartition.Code
	}
	select {
	case <-fence.Done():
		if err := fence.Err(); err != nil {
			return errorCode(err, 0)
		}
		return errNone
	default: // timed out waiting for a quorum
		return kerr.NotLeaderForPartition.Code
	}
}

// epochCode checks a request's current_leader_epoch against the stream's
// leader epoch (KIP-320), as Kafka does: -1 (or any negative) skips the
// check; an older epoch is a client that missed a leader change
// (FENCED_LEADER_EPOCH), a newer one a client that heard of a leader this
// server does not know yet (UNKNOWN_LEADER_EPOCH). Both are retriable:
// the client refreshes its metadata.
func epochCode(view LogView, current int32) int16 {
	if current < 0 {
		return errNone
	}
	switch le := view.LeaderEpoch(); {
	case current < le:
		return kerr.FencedLeaderEpoch.Code
	case current > le:
		return kerr.UnknownLeaderEpoch.Code
	}
	return errNone
}
