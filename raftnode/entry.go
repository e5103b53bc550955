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
)

// UserData returns the proposal payload for Kafka batches.
func UserData(batches []byte) []byte {
	d := make([]byte, 1+len(batches))
	d[0] = storage.TagUser
	copy(d[1:], batches)
	return d
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
	default:
		return Command{}, fmt.Errorf("%w: unknown kind %d", errBadCommand, data[1])
	}
}
