// Package raftnode runs VDL's Raft groups. The Core is deterministic: it
// takes events (ticks, peer messages, proposals, completed appends) and
// returns effects (sends, appends, completions). It never starts goroutines,
// reads a clock, does IO or draws global randomness, and it never depends on
// map iteration order, so the simulator can replay a whole cluster from a
// seed. Drivers (production and test) carry the effects out.
//
// The only reads the core makes are of its groups' storage (raft.Storage and
// the offset lookups), which is state the driver changes only through Append
// effects the core asked for.
package raftnode

import (
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"

	"github.com/vdl-project/vdl/raftnode/producers"
)

// ProposalID names a proposal; the driver chooses it and gets it back in
// exactly one Complete effect.
type ProposalID uint64

// Proposal failures. ErrNotLeader, ErrBackpressure and ErrShutdown are
// definite (the proposal was not and will not be committed); ErrOverwritten
// is definite too: the entry was replaced by a new leader's log.
var (
	ErrNotLeader    = errors.New("raftnode: not the leader")
	ErrBackpressure = errors.New("raftnode: too many uncommitted bytes, retry later")
	ErrOverwritten  = errors.New("raftnode: proposal overwritten by a new leader")
	ErrUnknownGroup = errors.New("raftnode: unknown group")
	ErrGroupExists  = errors.New("raftnode: group already exists")
	ErrShutdown     = errors.New("raftnode: group removed")
	// ErrUnknownOutcome: the log was replaced by a snapshot before the
	// proposal's entry was applied here; it may or may not be committed.
	ErrUnknownOutcome = errors.New("raftnode: outcome unknown: log replaced by a snapshot")
	// ErrConfChangeRejected: raft refused a membership change because
	// another one is still pending (or the change was not valid now).
	ErrConfChangeRejected = errors.New("raftnode: membership change rejected: another change is pending")
	// ErrEntryTooLarge: a proposal larger than Config.MaxEntryBytes (definite:
	// not proposed).
	ErrEntryTooLarge = errors.New("raftnode: proposal larger than the maximum entry size")
	// ErrDiskFull: the server is short of disk space and takes no new user
	// data until space is freed (definite: not proposed; retriable).
	ErrDiskFull = errors.New("raftnode: disk full: no new data is accepted until retention frees space")
)

// Storage is what the core reads of a group's log. *storage.Log satisfies it.
type Storage interface {
	raft.Storage
	// Applied is the last applied index made durable before a restart.
	Applied() uint64
	// EntryOffsets returns the Kafka offsets taken by the entry at index.
	EntryOffsets(index uint64) (base, next int64, err error)
	// NextOffsetAt returns the offset after all records up to index.
	NextOffsetAt(index uint64) (int64, error)
	// ProducerState returns the producer state saved last (SaveProducers)
	// and the index it is as of; 0, nil when none.
	ProducerState() (uint64, []byte)
}

// Config configures a Core. Zero values get sensible defaults.
type Config struct {
	ID            uint64 // this server's node id, the same in every group
	ElectionTick  int    // default 10
	HeartbeatTick int    // default 1
	// MaxSizePerMsg bounds an append message (default 1 MiB).
	MaxSizePerMsg uint64
	// MaxEntryBytes bounds one Raft entry's data (default
	// DefaultMaxEntryBytes); larger proposals fail with ErrEntryTooLarge.
	// The peer transport's frame limit is derived from it (MaxFrameBytes):
	// an entry that could not be sent to a follower is never proposed.
	MaxEntryBytes uint64
	// MaxInflightMsgs and MaxInflightBytes bound unacknowledged appends per
	// follower (defaults 256 and 32 MiB).
	MaxInflightMsgs  int
	MaxInflightBytes uint64
	// MaxUncommittedBytes bounds a group's proposed-but-not-applied bytes;
	// beyond it proposals fail fast with ErrBackpressure (default 64 MiB).
	MaxUncommittedBytes uint64
	// SyncWrites turns raft's asynchronous storage writes off: each Ready
	// is persisted before its messages are sent and the next one is taken.
	// It exists to measure what the pipeline buys.
	SyncWrites bool
	// NoQuiesce keeps idle groups ticking and heartbeating (quiesce.go).
	NoQuiesce bool
	// NoHibernate keeps a quiesced follower's RawNode (hibernate.go).
	NoHibernate bool
	Logger      raft.Logger
	// ProducerExpirationMs is how long an idempotent producer's state
	// outlives its last batch, against the log's clock (its batches'
	// timestamps); default producers.DefaultExpirationMs (1 day, Kafka's
	// producer.id.expiration.ms). Replicas should agree on it: one that
	// differs only decides differently as a leader.
	ProducerExpirationMs int64
	// ProducerSaveBytes is how many bytes of entries a group applies
	// between two saves of its producer state (a restart replays at most
	// that much); default DefaultProducerSaveBytes.
	ProducerSaveBytes uint64
	// NoHello: a starting group does not say hello to its replicas
	// (campaign.go). Only to replay simulator seeds recorded before
	// hellos existed on their course.
	NoHello bool
	// MaxCampaigns bounds the groups of this server that start an
	// election on their own at once (default DefaultMaxCampaigns; < 0:
	// unbounded). While that many campaign, the election clock of a
	// follower that knows no leader stands still (campaign.go).
	MaxCampaigns int
	// LearnerBytesPerTick paces the appends a leader sends to learners (a
	// replica a move adds, catching up): at most this many bytes of
	// entries a tick, over all groups (pace.go). 0: unpaced.
	LearnerBytesPerTick int64
}

// DefaultMaxCampaigns is the default Config.MaxCampaigns.
const DefaultMaxCampaigns = 512

// DefaultMaxEntryBytes is the default Config.MaxEntryBytes.
const DefaultMaxEntryBytes = 8 << 20

// MaxFrameBytes is the peer transport frame that carries any append
// message of a core configured with maxEntry and maxPerMsg (0: defaults):
// raft sends one entry alone or entries up to MaxSizePerMsg together, and a
// frame adds the message's own fields.
func MaxFrameBytes(maxEntry, maxPerMsg uint64) int {
	if maxEntry == 0 {
		maxEntry = DefaultMaxEntryBytes
	}
	if maxPerMsg == 0 {
		maxPerMsg = 1 << 20
	}
	return int(max(maxEntry, maxPerMsg) + 1<<20)
}

func (c *Config) defaults() {
	if c.ElectionTick == 0 {
		c.ElectionTick = 10
	}
	if c.HeartbeatTick == 0 {
		c.HeartbeatTick = 1
	}
	if c.MaxCampaigns == 0 {
		c.MaxCampaigns = DefaultMaxCampaigns
	}
	if c.MaxSizePerMsg == 0 {
		c.MaxSizePerMsg = 1 << 20
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if c.MaxInflightMsgs == 0 {
		c.MaxInflightMsgs = 256
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = 32 << 20
	}
	if c.MaxUncommittedBytes == 0 {
		c.MaxUncommittedBytes = 64 << 20
	}
	if c.Logger == nil {
		c.Logger = quietLogger{}
	}
	if c.ProducerExpirationMs == 0 {
		c.ProducerExpirationMs = producers.DefaultExpirationMs
	}
	if c.ProducerSaveBytes == 0 {
		c.ProducerSaveBytes = DefaultProducerSaveBytes
	}
}

// Core owns every Raft group of one server.
type Core struct {
	cfg      Config
	diskFull bool // refuse user proposals (SetDiskFull)
	groups   map[uint64]*group
	ids      []uint64 // sorted group ids: iteration order never comes from the map
	effects  []Effect
	q        quiescence
	// awake caches the sorted ids of the groups not quiesced, which are all
	// Tick visits: an idle server with thousands of quiesced groups then
	// costs per tick what its awake groups do. nil: rebuild from ids.
	awake []uint64
	// queuing holds the groups with proposals not yet stepped into raft:
	// TakeEffects runs after every event, and walking every group there
	// would make each event cost as much as the server has streams.
	queuing map[uint64]struct{}
	// campaigns counts the groups that are pre-candidates or candidates.
	campaigns int
	// elections adapts the campaign bound to what the servers carry.
	elections electionPace
	// chains refuses what follows a failed proposal of a connection.
	chains chains
}

// NewCore returns a core with no groups.
func NewCore(cfg Config) *Core {
	cfg.defaults()
	return &Core{cfg: cfg, groups: map[uint64]*group{}, q: newQuiescence(), queuing: map[uint64]struct{}{},
		elections: electionPace{limit: cfg.MaxCampaigns}}
}

// ID returns this server's node id.
func (c *Core) ID() uint64 { return c.cfg.ID }

// SetDiskFull makes the core refuse user proposals (ErrDiskFull) while the
// server is short of disk space; commands (retention) and membership
// changes go on.
func (c *Core) SetDiskFull(full bool) { c.diskFull = full }

// TakeEffects proposes what was submitted since the last call and returns
// the effects emitted since then, in order. Proposals are stepped into raft
// here, a group's at once, so many proposals become one append and one
// message per follower.
func (c *Core) TakeEffects() []Effect {
	if len(c.queuing) > 0 {
		for _, id := range sortedGroups(c.queuing) {
			if g := c.groups[id]; g != nil {
				c.proposeQueued(g)
				if len(g.queued) > 0 {
					continue // its appends are in flight: next time
				}
			}
			delete(c.queuing, id)
		}
	}
	e := c.effects
	c.effects = nil
	return e
}

func (c *Core) emit(e Effect) {
	if d, ok := e.(Complete); ok {
		c.chains.settle(d)
	}
	c.effects = append(c.effects, e)
}

// EndChain forgets a chain whose connection closed (Chain).
func (c *Core) EndChain(chain Chain) { c.chains.end(chain) }

// Groups returns the ids of the hosted groups, sorted.
func (c *Core) Groups() []uint64 { return slices.Clone(c.ids) }

// AddGroup starts hosting a group whose log is st. A new group's storage
// must have been bootstrapped with its initial membership.
func (c *Core) AddGroup(id uint64, st Storage) error {
	if _, ok := c.groups[id]; ok {
		return fmt.Errorf("%w: %d", ErrGroupExists, id)
	}
	if id == LivenessGroup {
		return fmt.Errorf("raftnode: group id %d is the liveness heartbeat's", id)
	}
	applied := st.Applied()
	rn, err := c.newRawNode(st, applied)
	if err != nil {
		return fmt.Errorf("raftnode: group %d: %w", id, err)
	}
	hwm, err := st.NextOffsetAt(applied)
	if err != nil {
		hwm = 0
	}
	g := &group{id: id, rn: rn, st: st, applied: applied, hwm: hwm, pending: map[uint64][]pending{}}
	if err := c.loadProducers(g); err != nil {
		return err
	}
	c.groups[id] = g
	c.ids = append(c.ids, id)
	slices.Sort(c.ids)
	c.awake = nil
	if applied > 0 {
		g.appliedTerm, _ = st.Term(applied)
	}
	c.drain(g)
	c.hello(g)
	return nil
}

// newRawNode starts a group's raft on its log, applied up to applied.
func (c *Core) newRawNode(st Storage, applied uint64) (*raft.RawNode, error) {
	return raft.NewRawNode(&raft.Config{
		ID:                        c.cfg.ID,
		ElectionTick:              c.cfg.ElectionTick,
		HeartbeatTick:             c.cfg.HeartbeatTick,
		Storage:                   st,
		Applied:                   applied,
		MaxSizePerMsg:             c.cfg.MaxSizePerMsg,
		MaxCommittedSizePerReady:  4 * c.cfg.MaxSizePerMsg,
		MaxInflightMsgs:           c.cfg.MaxInflightMsgs,
		MaxInflightBytes:          c.cfg.MaxInflightBytes,
		CheckQuorum:               true,
		PreVote:                   true,
		AsyncStorageWrites:        !c.cfg.SyncWrites,
		DisableProposalForwarding: true,
		StepDownOnRemoval:         true,
		Logger:                    c.cfg.Logger,
	})
}

// appliedView is what a group had applied when it started here: the
// view's applied index, its term and the high watermark.
func (c *Core) appliedView(id uint64) (uint64, uint64, int64) {
	g, ok := c.groups[id]
	if !ok {
		return 0, 0, 0
	}
	return g.applied, g.appliedTerm, g.hwm
}

// RemoveGroup stops hosting a group. Its pending proposals fail with
// ErrShutdown (they may still commit elsewhere: callers treat it as unknown).
func (c *Core) RemoveGroup(id uint64) {
	g, ok := c.groups[id]
	if !ok {
		return
	}
	g.failAll(c, ErrShutdown)
	c.forgetQuiet(id)
	c.noteRole(g, raft.StateFollower)
	delete(c.groups, id)
	c.ids = slices.DeleteFunc(c.ids, func(x uint64) bool { return x == id })
	c.awake = nil
	// Its storage effects not taken yet belong to the raft that is gone.
	c.effects = slices.DeleteFunc(c.effects, func(e Effect) bool {
		eg, ok := EffectGroup(e)
		return ok && eg == id
	})
}

// Shutdown ends every group: each pending proposal and read completes with
// err, and the core hosts nothing. It returns the completions not yet taken
// (those emitted before, then the failures in group and index order); the
// other effects not yet taken are dropped.
func (c *Core) Shutdown(err error) []Complete {
	for _, id := range c.ids {
		c.groups[id].failAll(c, err)
	}
	var out []Complete
	for _, e := range c.effects {
		if cm, ok := e.(Complete); ok {
			out = append(out, cm)
		}
	}
	c.effects = nil
	c.groups, c.ids, c.awake = map[uint64]*group{}, nil, nil
	c.q, c.queuing, c.campaigns = newQuiescence(), map[uint64]struct{}{}, 0
	c.elections = electionPace{limit: c.cfg.MaxCampaigns}
	return out
}

// members returns the group's voters and learners, sorted.
func (c *Core) members(group uint64) []uint64 {
	g, ok := c.groups[group]
	if !ok {
		return nil
	}
	cfg := c.raw(g).Status().Config
	var ids []uint64
	for id := range cfg.Voters.IDs() {
		ids = append(ids, id)
	}
	for id := range cfg.Learners {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
