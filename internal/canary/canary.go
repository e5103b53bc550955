// Package canary names the deliberately broken variants of production code
// that prove VDL's checks can fail (docs/testing.md). Each is a branch in
// the production code guarded by On. Only a binary built with the
// vdlcanary tag can switch one on (Set); in every other build On is a
// constant false and the broken branches compile away.
package canary

// Name is one canary: a guarantee broken on purpose, and what must catch it.
type Name string

// The canaries.
const (
	None Name = ""
	// AckBeforeFsync: the storage pipeline reports appends durable to raft
	// before their fsync (raftnode.Node.Written). Lost on power loss.
	AckBeforeFsync Name = "ack-before-fsync"
	// AckBeforeCommit: a produce is acknowledged once the leader's own
	// append is durable, before a quorum has it (raftnode.Core).
	AckBeforeCommit Name = "ack-before-commit"
	// ReadAboveHWM: fetches see the log end, uncommitted records included
	// (server.Backend).
	ReadAboveHWM Name = "read-above-hwm"
	// ReorderResponses: two responses of a connection are swapped
	// (kafka.Session).
	ReorderResponses Name = "reorder-responses"
	// ServeCorrupt: reads skip the records' checksums, serving bits rotted
	// on the medium (storage).
	ServeCorrupt Name = "serve-corrupt"
	// SkipPoison: after a failed produce, later requests on the connection
	// are served (kafka.Session).
	SkipPoison Name = "skip-poison"
	// RetainAboveCommit: retention is not bounded by the commit index
	// (raftnode apply, the admin API).
	RetainAboveCommit Name = "retain-above-commit"
	// HardStateNotSynced: a hard state written without entries (a vote, a
	// new term) is reported durable without an fsync (raftnode.SyncJob).
	HardStateNotSynced Name = "hard-state-not-synced"
	// ConfStateNotReplayed: a restarted log forgets membership changes
	// recorded after its start (storage recovery).
	ConfStateNotReplayed Name = "conf-state-not-replayed"
	// FollowerServesFetch: a follower answers fetches from its own log
	// (server.Backend).
	FollowerServesFetch Name = "follower-serves-fetch"
	// NoReadFence: reads (fetches, ListOffsets, the group coordinator)
	// skip the leadership confirmation (server.Backend).
	NoReadFence Name = "no-read-fence"
	// DedupOff: the leader appends idempotent producers' retries again
	// instead of answering them with the original's offsets
	// (raftnode.Core): duplicates.
	DedupOff Name = "dedup-off"
	// Livelock: the watchdog's canary: once running for a while,
	// raftnode.Node.Flush makes its own work (it ticks the core whenever
	// it runs out of effects) and never returns.
	Livelock Name = "livelock"
	// QueueAnyDir: the transport writes a message queued while a peer's
	// stream was down on the next connection whatever data dir the peer
	// presents there (raftnode/transport, the simulator's model of it):
	// a process restarted on an empty disk is told what was decided for
	// the old one. The receiver's own defence goes too (raftnode's
	// checkCommit: a heartbeat committing past the log is dropped), which
	// since 3 December keeps that message from stopping the server: each
	// alone is one wall, and the canary shows the simulator sees a breach
	// of both.
	QueueAnyDir Name = "queue-any-dir"
)

// All lists every canary.
var All = []Name{AckBeforeFsync, AckBeforeCommit, ReadAboveHWM, ReorderResponses, ServeCorrupt,
	SkipPoison, RetainAboveCommit, HardStateNotSynced, ConfStateNotReplayed, FollowerServesFetch,
	NoReadFence, DedupOff, Livelock, QueueAnyDir}
