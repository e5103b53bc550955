package kafka_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/kafkatest"
)

func startRaw(t *testing.T, cfg kafka.Config) (string, *kafkatest.Backend) {
	addr, be, _ := startRawServer(t, cfg)
	return addr, be
}

func startRawServer(t *testing.T, cfg kafka.Config) (string, *kafkatest.Backend, *kafka.Server) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	be := kafkatest.New(kafka.Broker{NodeID: 1, Host: "127.0.0.1", Port: int32(l.Addr().(*net.TCPAddr).Port)})
	be.AddStream("a")
	srv, err := kafka.NewServer(cfg, be, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String(), be, srv
}

func writeFrame(t *testing.T, c net.Conn, frame []byte) {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(frame)))
	_, err := c.Write(append(b, frame...))
	require.NoError(t, err)
}

func requireClosed(t *testing.T, c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := io.ReadAll(c)
	require.NoError(t, err, "EOF expected, not a timeout")
}

func TestServerClosesOnOversizeFrame(t *testing.T) {
	addr, _ := startRaw(t, kafka.Config{MaxFrameBytes: 1 << 10})
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte{0x7f, 0xff, 0xff, 0xff})
	require.NoError(t, err)
	requireClosed(t, c)
}

func TestServerClosesOnUnknownKey(t *testing.T) {
	addr, _ := startRaw(t, kafka.Config{})
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	writeFrame(t, c, []byte{0x7f, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff})
	requireClosed(t, c)
}

func TestServerPipelinedResponsesInOrder(t *testing.T) {
	addr, be := startRaw(t, kafka.Config{})
	be.SetCommitDelay(3 * time.Millisecond)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	sent := map[int32]kmsg.Request{}
	var all []byte
	for i := int32(1); i <= 50; i++ {
		var req kmsg.Request
		if i%5 == 0 {
			req = kmsg.NewPtrMetadataRequest()
		} else {
			req = produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "v"))
		}
		sent[i] = req
		fr := encodeRequest(req, i)
		all = binary.BigEndian.AppendUint32(all, uint32(len(fr)))
		all = append(all, fr...)
	}
	_, err = c.Write(all) // one write: every request in flight at once
	require.NoError(t, err)
	br := bufio.NewReader(c)
	next := int64(0)
	for i := int32(1); i <= 50; i++ {
		var l [4]byte
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.ReadFull(br, l[:])
		require.NoError(t, err)
		body := make([]byte, binary.BigEndian.Uint32(l[:]))
		_, err = io.ReadFull(br, body)
		require.NoError(t, err)
		got := decodeResponses(t, append(l[:], body...), sent)
		require.Equal(t, i, got[0].corr)
		if p, ok := got[0].resp.(*kmsg.ProduceResponse); ok {
			require.Equal(t, next, p.Topics[0].Partitions[0].BaseOffset)
			next++
		}
	}
}

func TestServerConnectionLimit(t *testing.T) {
	addr, _ := startRaw(t, kafka.Config{MaxConnections: 1})
	c1, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c1.Close()
	// c1 is served.
	writeFrame(t, c1, encodeRequest(kmsg.NewPtrApiVersionsRequest(), 1))
	var l [4]byte
	_ = c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadFull(c1, l[:])
	require.NoError(t, err)
	c2, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c2.Close()
	requireClosed(t, c2)
}

func TestServerCloseIsGraceful(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	be := kafkatest.New(kafka.Broker{NodeID: 1, Host: "127.0.0.1", Port: 1})
	be.AddStream("a")
	be.SetCommitDelay(200 * time.Millisecond)
	srv, err := kafka.NewServer(kafka.Config{}, be, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	go func() { _ = srv.Serve(l) }()
	c, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	writeFrame(t, c, encodeRequest(produceReq(8, -1, "a", makeBatch(t, 0, -1, 1, "v")), 1))
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, srv.Close()) // waits for the produce to be answered
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	data, err := io.ReadAll(c)
	require.NoError(t, err)
	got := decodeResponses(t, data, map[int32]kmsg.Request{1: produceReq(8, -1, "a", nil)})
	require.Len(t, got, 1)
	require.Equal(t, int16(0), got[0].resp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode)
}
