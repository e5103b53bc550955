package configserver

import (
	"encoding/json"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// A replica move (Meituan's pipeline) takes a stream's replica from server
// From to server To one step at a time, each step a replicated command so
// that any config server leader resumes it:
//
//	add-learner  To is a replica in the catalog (it joins, empty); the
//	             driver asks the stream's leader to add it as a learner
//	catch-up     the learner replicates; the driver waits until the leader
//	             reports it has every committed entry
//	promote      the driver asks the leader to make it a voter
//	remove-old   the driver asks the leader to remove From (moving the
//	             leadership off From first); done: To takes From's place in
//	             the catalog, and From, no longer a replica, removes its copy
//
// Cancelling at any step before From is removed takes To back out (the
// leader removes it; the catalog drops it; To removes its copy): the stream
// is as before. The driver is moves_driver.go.

// Move is one replica move.
type Move struct {
	Stream  string `json:"stream"`
	Group   uint64 `json:"group"`
	From    uint64 `json:"from"`
	To      uint64 `json:"to"`
	Step    string `json:"step"`
	State   string `json:"state"` // active, done, cancelled
	Cancel  bool   `json:"cancel,omitempty"`
	Started int64  `json:"started_ms"`
	Updated int64  `json:"updated_ms"`
	// Reason is why the move waits, or how it ended.
	Reason string `json:"reason,omitempty"`
}

// Move steps and states.
const (
	StepAddLearner = "add-learner"
	StepCatchUp    = "catch-up"
	StepPromote    = "promote"
	StepRemoveOld  = "remove-old"

	MoveActive    = "active"
	MoveDone      = "done"
	MoveCancelled = "cancelled"
)

// Move commands.
const (
	CmdMoveStart  = "move-start"
	CmdMoveStep   = "move-step"
	CmdMoveCancel = "move-cancel"
	CmdMoveEnd    = "move-end"
)

var bMoves = []byte("moves") // stream name -> its latest Move

func applyMoveStart(tx *bolt.Tx, c Command) (string, error) {
	st, err := activeStream(tx, c.Name)
	if err != nil {
		return "", err
	}
	if m, ok := getMove(tx, c.Name); ok && m.State == MoveActive {
		return "", fmt.Errorf("%w: stream %s already has a move (%d to %d, %s)", ErrExists, c.Name, m.From, m.To, m.Step)
	}
	from, to := c.Node, c.To
	srv, ok := getServer(tx, to)
	switch {
	case !ok:
		return "", fmt.Errorf("%w: server %d is not registered", ErrInvalid, to)
	case srv.State != ServerActive:
		return "", fmt.Errorf("%w: server %d is %s: no new replicas go there", ErrInvalid, to, srv.State)
	}
	if err := st.StartMove(from, to); err != nil {
		return "", err
	}
	if err := putJSON(tx.Bucket(bStreams), []byte(st.Name), st); err != nil {
		return "", err
	}
	m := Move{Stream: st.Name, Group: st.Group, From: from, To: to, Step: StepAddLearner, State: MoveActive, Started: c.At, Updated: c.At}
	return fmt.Sprintf("move of %s from %d to %d started", st.Name, from, to), putJSON(tx.Bucket(bMoves), []byte(st.Name), m)
}

// CheckMoveStep refuses a step of a cancelled move: the driver proposed
// it before the cancel applied, and a cancelled move that went on could
// reach remove-old after the cancel took the new replica out
// (nextMoveAction). The state machine and the simulator's apply it.
func CheckMoveStep(m Move) error {
	if m.Cancel {
		return fmt.Errorf("%w: the move of %s is being cancelled", ErrInvalid, m.Stream)
	}
	return nil
}

// CheckMoveCancel refuses a cancel once the move is removing the old
// replica: that removal may be on its way (the driver asked the leader;
// its report may not show it yet), and taking the new replica out too
// could leave the group without both (simulator seed 3430 with the
// control plane: voters [2 3], catalog [2 4 3]). The move finishes; the
// stream can be moved back after.
func CheckMoveCancel(m Move) error {
	if m.Step == StepRemoveOld {
		return fmt.Errorf("%w: too late to cancel the move of %s: it is removing the old replica %d; once it is done, move the stream back (move start %s --from %d --to %d)",
			ErrInvalid, m.Stream, m.From, m.Stream, m.To, m.From)
	}
	return nil
}

func applyMoveStep(tx *bolt.Tx, c Command) (string, error) {
	m, ok := getMove(tx, c.Name)
	if !ok || m.State != MoveActive {
		return "", fmt.Errorf("%w: no active move of %s", ErrNotFound, c.Name)
	}
	if !slices.Contains([]string{StepCatchUp, StepPromote, StepRemoveOld}, c.Step) {
		return "", fmt.Errorf("%w: move step %q", ErrInvalid, c.Step)
	}
	if err := CheckMoveStep(m); err != nil {
		return "", err
	}
	m.Step, m.Updated, m.Reason = c.Step, c.At, ""
	return fmt.Sprintf("move of %s from %d to %d: %s", m.Stream, m.From, m.To, m.Step), putJSON(tx.Bucket(bMoves), []byte(m.Stream), m)
}

func applyMoveCancel(tx *bolt.Tx, c Command) (string, error) {
	m, ok := getMove(tx, c.Name)
	if !ok || m.State != MoveActive {
		return "", fmt.Errorf("%w: no active move of %s", ErrNotFound, c.Name)
	}
	if err := CheckMoveCancel(m); err != nil {
		return "", err
	}
	m.Cancel, m.Updated = true, c.At
	return fmt.Sprintf("move of %s from %d to %d: cancel requested at %s", m.Stream, m.From, m.To, m.Step),
		putJSON(tx.Bucket(bMoves), []byte(m.Stream), m)
}

// applyMoveEnd ends a move: done, To takes From's place; cancelled, To
// leaves the catalog.
func applyMoveEnd(tx *bolt.Tx, c Command) (string, error) {
	m, ok := getMove(tx, c.Name)
	if !ok || m.State != MoveActive {
		return "", fmt.Errorf("%w: no active move of %s", ErrNotFound, c.Name)
	}
	st, err := activeStream(tx, c.Name)
	if err != nil {
		return "", err
	}
	if err := st.EndMove(m, c.Step); err != nil {
		return "", err
	}
	m.State, m.Updated, m.Reason = c.Step, c.At, c.Reason
	if err := putJSON(tx.Bucket(bStreams), []byte(st.Name), st); err != nil {
		return "", err
	}
	return fmt.Sprintf("move of %s from %d to %d %s; replicas %v", m.Stream, m.From, m.To, c.Step, st.Replicas),
		putJSON(tx.Bucket(bMoves), []byte(m.Stream), m)
}

// StartMove makes to a replica of st joining for a move from from (the
// catalog's side of a move's start, which the state machine and the
// simulator's control plane share; that to is an active server is the
// caller's to check).
func (st *Stream) StartMove(from, to uint64) error {
	switch {
	case !slices.Contains(st.Replicas, from):
		return fmt.Errorf("%w: server %d is not a replica of %s (%v)", ErrInvalid, from, st.Name, st.Replicas)
	case slices.Contains(st.Replicas, to):
		return fmt.Errorf("%w: server %d is already a replica of %s", ErrInvalid, to, st.Name)
	}
	if err := st.FormerReplica(to); err != nil {
		return err
	}
	// The new replica joins: dir 0 never founds the stream.
	st.Replicas, st.Dirs = append(slices.Clone(st.Replicas), to), append(padDirs(st), 0)
	return nil
}

// EndMove is the catalog's side of move m's end (step: MoveDone or
// MoveCancelled). Done, the new replica takes the old one's slot (the
// preferred leader's slot stays the first) and the old one is a former
// replica; cancelled, the new one leaves and is a former replica (it may
// have joined).
func (st *Stream) EndMove(m Move, step string) error {
	reps, dirs := slices.Clone(st.Replicas), padDirs(st)
	ti := slices.Index(reps, m.To)
	switch step {
	case MoveDone:
		if fi := slices.Index(reps, m.From); fi >= 0 && ti >= 0 {
			reps[fi], dirs[fi] = m.To, 0
			reps, dirs = slices.Delete(reps, ti, ti+1), slices.Delete(dirs, ti, ti+1)
		}
		st.Former = appendNew(st.Former, m.From)
	case MoveCancelled:
		if ti >= 0 {
			reps, dirs = slices.Delete(reps, ti, ti+1), slices.Delete(dirs, ti, ti+1)
		}
		st.Former = appendNew(st.Former, m.To)
	default:
		return fmt.Errorf("%w: a move ends done or cancelled, not %q", ErrInvalid, step)
	}
	st.Replicas, st.Dirs = reps, dirs
	return nil
}

// appendNew appends id unless xs has it.
func appendNew(xs []uint64, id uint64) []uint64 {
	if slices.Contains(xs, id) {
		return xs
	}
	return append(xs, id)
}

// padDirs is the stream's dirs, one per replica (older records: 0s).
func padDirs(st *Stream) []uint64 {
	d := slices.Clone(st.Dirs)
	for len(d) < len(st.Replicas) {
		d = append(d, 0)
	}
	return d[:len(st.Replicas)]
}

func getMove(tx *bolt.Tx, name string) (Move, bool) {
	var m Move
	b := tx.Bucket(bMoves).Get([]byte(name))
	return m, b != nil && json.Unmarshal(b, &m) == nil
}

// Moves lists the latest move of every stream that had one.
func (s *State) Moves() (out []Move) {
	_ = s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bMoves).ForEach(func(_, v []byte) error {
			var m Move
			if json.Unmarshal(v, &m) == nil {
				out = append(out, m)
			}
			return nil
		})
	})
	return out
}
