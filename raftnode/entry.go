package raftnode

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vdl-project/vdl/storage"
)

// Proposal payloads. A user proposal is storage.TagUser followed by whole
// Kafka RecordBatch v2 batches; a command is storage.TagCommand followed by
// a command kind byte and its arguments. The tags are what storage keys its
// record types on, so raftnode and storage agree on one encoding.

// Command kinds carried by TagCommand entries.
const (
	// CmdRetain deletes whole head segments whose records are all below an
	// offset, on every replica at the same log position.
	CmdRetain byte = 1
	// CmdConfig changes the stream's replicated config
	// (storage.Log.ApplyConfig), on every replica at the same log position.
	CmdConfig byte = 2
)

// ConfigData returns the proposal payload of a config command: reset
// clears every override first, then ops apply in order. Layout after the
// tag and kind: reset (1 byte), op count (u16), then per op: delete (1
// byte), key length (u16), key, value length (u32), value.
func ConfigData(reset bool, ops []storage.ConfigOp) []byte {
	d := []byte{storage.TagCommand, CmdConfig, 0}
	if reset {
		d[2] = 1
	}
	d = binary.BigEndian.AppendUint16(d, uint16(len(ops)))
	for _, op := range ops {
		del := byte(0)
		if op.Delete {
			del = 1
		}
		d = append(d, del)
		d = binary.BigEndian.AppendUint16(d, uint16(len(op.Key)))
		d = append(d, op.Key...)
		d = binary.BigEndian.AppendUint32(d, uint32(len(op.Value)))
		d = append(d, op.Value...)
	}
	return d
}

func decodeConfig(b []byte) (Command, error) {
	bad := fmt.Errorf("%w: config", errBadCommand)
	if len(b) < 3 {
		return Command{}, bad
	}
	cmd := Command{Kind: CmdConfig, Reset: b[0] == 1}
	n := int(binary.BigEndian.Uint16(b[1:]))
	b = b[3:]
	if n > len(b) {
		return Command{}, bad
	}
	for range n {
		if len(b) < 3 {
			return Command{}, bad
		}
		op := storage.ConfigOp{Delete: b[0] == 1}
		kl := int(binary.BigEndian.Uint16(b[1:]))
		b = b[3:]
		if len(b) < kl+4 {
			return Command{}, bad
		}
		op.Key = string(b[:kl])
		vl := binary.BigEndian.Uint32(b[kl:])
		b = b[kl+4:]
		if uint64(vl) > uint64(len(b)) {
			return Command{}, bad
		}
		op.Value = string(b[:vl])
		b = b[vl:]
		cmd.Ops = append(cmd.Ops, op)
	}
	if len(b) != 0 {
		return Command{}, bad
	}
	return cmd, nil
}

// UserData returns the proposal payload for Kafka batches.
//
// Built by append, not make and copy: growing a slice by append leaves
// the bytes it copies unzeroed, where make zeroes all of them first (for a
// 1 MiB produce that zeroing cost the leader as much as the copy).
func UserData(batches []byte) []byte {
	return append([]byte{storage.TagUser}, batches...)
}

// UserDataIn is UserData made in place: room is the batches with one byte
// before them that the caller may overwrite (kafka.Records.Room). No
// copy: a produce's bytes are copied once into raft's own entry (raft
// clones every proposal), not first into this one too.
func UserDataIn(room []byte) []byte {
	room[0] = storage.TagUser
	return room
}

// RetainData returns the proposal payload of a retention command.
func RetainData(beforeOffset int64) []byte {
	d := make([]byte, 2+8)
	d[0] = storage.TagCommand
	d[1] = CmdRetain
	binary.BigEndian.PutUint64(d[2:], uint64(beforeOffset))
	return d
}

// Command is a decoded TagCommand entry.
type Command struct {
	Kind         byte
	BeforeOffset int64 // CmdRetain
	Reset        bool  // CmdConfig
	Ops          []storage.ConfigOp
}

var errBadCommand = errors.New("raftnode: malformed command")

// DecodeCommand parses the payload of a TagCommand entry (tag included).
func DecodeCommand(data []byte) (Command, error) {
	if len(data) < 2 || data[0] != storage.TagCommand {
		return Command{}, errBadCommand
	}
	switch data[1] {
	case CmdRetain:
		if len(data) != 10 {
			return Command{}, fmt.Errorf("%w: retain needs 8 bytes, got %d", errBadCommand, len(data)-2)
		}
		return Command{Kind: CmdRetain, BeforeOffset: int64(binary.BigEndian.Uint64(data[2:]))}, nil
	case CmdConfig:
		return decodeConfig(data[2:])
	default:
		return Command{}, fmt.Errorf("%w: unknown kind %d", errBadCommand, data[1])
	}
}
