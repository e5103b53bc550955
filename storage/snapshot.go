package storage

import (
	"encoding/binary"
	"errors"
	"fmt"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// A VDL Raft snapshot is the log's retention point: the index and term of
// the last entry before the log start, the membership there, and (in Data)
// the Kafka offset the log starts at. A follower that installs it has an
// empty log starting at the same place as the leader's; the entries the
// leader still holds then reach it by ordinary, pipelined replication. The
// "set of closed segments" is thus shipped entry by entry rather than file
// by file (see docs/storage.md).

const snapshotDataVersion = 1

func encodeSnapshotData(startOffset int64) []byte {
	b := make([]byte, 9)
	b[0] = snapshotDataVersion
	binary.BigEndian.PutUint64(b[1:], uint64(startOffset))
	return b
}

func decodeSnapshotData(b []byte) (int64, error) {
	if len(b) != 9 || b[0] != snapshotDataVersion {
		return 0, fmt.Errorf("%w: snapshot data of %d bytes", ErrBadEntry, len(b))
	}
	return int64(binary.BigEndian.Uint64(b[1:])), nil
}

// InstallSnapshot replaces the whole log with an empty one that starts
// right after the snapshot. It is durable on return. The retention point
// and the hard state go to the meta file first: a crash part way leaves
// segments with none at the retention point, which Open recognises and
// finishes (see recover).
func (l *Log) InstallSnapshot(snap *pb.Snapshot) error {
	md := snap.GetMetadata()
	if md.GetIndex() == 0 {
		return errors.New("storage: empty snapshot")
	}
	start, err := decodeSnapshotData(snap.GetData())
	if err != nil {
		return err
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.checkWriter(); err != nil {
		return err
	}
	idx := md.GetIndex()
	st := l.st
	st.term = max(st.term, md.GetTerm()) // a no-op for followers; sets term 1 at Bootstrap
	st.commit, st.applied, st.maxTs = max(st.commit, idx), max(st.applied, idx), -1
	m := l.meta
	m.retFirst, m.retPrevTerm, m.retStart = idx+1, md.GetTerm(), start
	m.confs = []confEntry{{index: idx, cs: proto.Clone(pb.EnsureConfState(md.GetConfState())).(*pb.ConfState)}}
	m.st = st
	if err := saveMeta(l.fs, l.dir, &m); err != nil {
		return l.fail(err)
	}
	l.mu.Lock()
	old := l.segs
	l.segs = nil
	l.ridx, l.lidx = nil, nil
	l.cache.reset()
	l.meta, l.confs, l.st = m, m.confs, st
	for _, s := range old {
		s.closeFiles()
		dropSegFiles(l.fs, s.base)
	}
	err = l.createFirst()
	l.mu.Unlock()
	if err != nil {
		return l.fail(err)
	}
	l.pendingApplied.Store(idx)
	l.durableApplied.Store(idx)
	return nil
}
