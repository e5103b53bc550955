package kafka_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
)

func initPIDReq(v int16, txn *string) *kmsg.InitProducerIDRequest {
	r := kmsg.NewPtrInitProducerIDRequest()
	r.Version, r.TransactionalID, r.TransactionTimeoutMillis = v, txn, 60000
	r.ProducerID, r.ProducerEpoch = 17, 3 // v3+: a KIP-360 bump of an id we ignore
	return r
}

func initPID(t *testing.T, h *harness, v int16) *kmsg.InitProducerIDResponse {
	t.Helper()
	h.send(initPIDReq(v, nil))
	return one(t, h).(*kmsg.InitProducerIDResponse)
}

// InitProducerId hands out ids from blocks allocated in the offsets
// stream: a block record at offset o holds ids [o×1000, o×1000+1000);
// every version answers epoch 0 and a new id, a bump included.
func TestInitProducerIDAllocatesBlocks(t *testing.T) {
	h, g := groupHarness(t, kafka.ProfileModern)
	h.produceOK(7, "a", "x") // offsets stream untouched: the first block is at offset 0
	var ids []int64
	for v := int16(0); v <= 4; v++ {
		r := initPID(t, h, v)
		require.Equal(t, int16(0), r.ErrorCode, "v%d", v)
		require.Equal(t, int16(0), r.ProducerEpoch)
		ids = append(ids, r.ProducerID)
	}
	require.Equal(t, []int64{0, 1, 2, 3, 4}, ids)
	// Another session of the same server shares the block.
	p := peer(t, h, g)
	require.Equal(t, int64(5), initPID(t, p, 4).ProducerID)

	// A block record in the offsets stream is not an offset commit.
	view, err := h.be.Log(kafka.DefaultOffsetsTopic)
	require.NoError(t, err)
	require.Equal(t, int64(1), view.HighWatermark())
	st := g.Status(h.now, func(string) (int64, bool) { return 0, false })
	require.Zero(t, st.BadRecords)

	// Another server (its own allocator) gets the next block: offset 1.
	other := peer(t, h, kafka.NewGroups(kafka.GroupsConfig{}, h.be))
	require.Equal(t, int64(kafka.ProducerIDBlock), initPID(t, other, 2).ProducerID)
}

// Transactions are not supported; no leader or no forwarder means no id
// now (retriable), a forwarder asks the leader.
func TestInitProducerIDErrors(t *testing.T) {
	h, _ := groupHarness(t, kafka.ProfileModern)
	txn := "tx"
	h.send(initPIDReq(4, &txn))
	r := one(t, h).(*kmsg.InitProducerIDResponse)
	require.Equal(t, kerr.UnsupportedVersion.Code, r.ErrorCode)
	require.Equal(t, int64(-1), r.ProducerID)

	h.be.StreamByName(kafka.DefaultOffsetsTopic).SetLeader(2)
	require.Equal(t, kerr.CoordinatorNotAvailable.Code, initPID(t, h, 1).ErrorCode)
	h.be.StreamByName(kafka.DefaultOffsetsTopic).SetLeader(-1)
	require.Equal(t, kerr.CoordinatorNotAvailable.Code, initPID(t, h, 1).ErrorCode)

	// With a forwarder, the leader (broker 2) allocates.
	h.be.StreamByName(kafka.DefaultOffsetsTopic).SetLeader(2)
	var asked []int32
	fwd := func(leader int32, done func(int64, error)) {
		asked = append(asked, leader)
		if len(asked) == 1 {
			done(-1, errors.New("leader unreachable"))
			return
		}
		done(7000, nil)
	}
	g := kafka.NewGroups(kafka.GroupsConfig{ForwardProducerIDs: fwd}, h.be)
	s, err := kafka.NewSessionWithGroups(kafka.Config{}, h.be, g, func(c kafka.Completion) { h.compl = append(h.compl, c) })
	require.NoError(t, err)
	h.s = s
	require.Equal(t, kerr.CoordinatorNotAvailable.Code, initPID(t, h, 3).ErrorCode)
	require.Equal(t, int64(7000), initPID(t, h, 3).ProducerID)
	require.Equal(t, int64(7001), initPID(t, h, 0).ProducerID)
	require.Equal(t, []int32{2, 2}, asked)

	// The kafka-0.10 profile does not serve it: the connection closes.
	old, _ := groupHarness(t, kafka.ProfileKafka0102)
	old.send(initPIDReq(0, nil))
	require.Empty(t, old.take())
	require.True(t, old.out.Close)
}

// The idempotent refusals map to Kafka's codes, INVALID_PRODUCER_EPOCH in
// every Produce version.
func TestIdempotentErrorCodes(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	for _, c := range []struct {
		err  error
		code int16
	}{
		{kafka.ErrOutOfOrderSequence, kerr.OutOfOrderSequenceNumber.Code},
		{kafka.ErrProducerEpoch, kerr.InvalidProducerEpoch.Code},
		{kafka.ErrUnknownProducerID, kerr.UnknownProducerID.Code},
		{kafka.ErrDuplicateSequence, kerr.DuplicateSequenceNumber.Code},
	} {
		for _, v := range []int16{3, 8} {
			h = newHarness(t, kafka.Config{})
			h.be.FailProduces(c.err)
			h.send(produceReq(v, -1, "a", makeBatch(t, 0, -1, 1000, "x")))
			p := one(t, h).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
			require.Equal(t, c.code, p.ErrorCode, "%v v%d", c.err, v)
		}
	}
}
