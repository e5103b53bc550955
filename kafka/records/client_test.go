package records

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// captureBroker is a minimal one-partition Kafka broker that records the
// raw `records` bytes of every Produce, so a real client's encoder (franz-go
// kgo) can be checked against this package. It only speaks non-flexible
// versions; tests cap the client with kgo.MaxVersions.
type captureBroker struct {
	ln       net.Listener
	mu       sync.Mutex
	produced [][]byte
	versions []int16
	next     int64
}

func newCaptureBroker(t *testing.T) *captureBroker {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &captureBroker{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go b.serve(c)
		}
	}()
	return b
}

func (b *captureBroker) serve(c net.Conn) {
	defer c.Close()
	host, portS, _ := net.SplitHostPort(b.ln.Addr().String())
	port, _ := strconv.Atoi(portS)
	for {
		var sz [4]byte
		if _, err := io.ReadFull(c, sz[:]); err != nil {
			return
		}
		req := make([]byte, binary.BigEndian.Uint32(sz[:]))
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		key, ver := int16(binary.BigEndian.Uint16(req)), int16(binary.BigEndian.Uint16(req[2:]))
		corr := req[4:8]
		cl := int(int16(binary.BigEndian.Uint16(req[8:])))
		body := req[10+max(cl, 0):]
		var resp []byte
		switch key {
		case 18: // ApiVersions
			r := kmsg.ApiVersionsResponse{Version: ver}
			for _, k := range [][3]int16{{0, 0, 7}, {3, 0, 7}, {18, 0, 2}} {
				r.ApiKeys = append(r.ApiKeys, kmsg.ApiVersionsResponseApiKey{ApiKey: k[0], MinVersion: k[1], MaxVersion: k[2]})
			}
			resp = r.AppendTo(nil)
		case 3: // Metadata
			r := kmsg.MetadataResponse{Version: ver}
			r.Brokers = []kmsg.MetadataResponseBroker{{NodeID: 1, Host: host, Port: int32(port)}}
			r.ControllerID = 1
			r.Topics = []kmsg.MetadataResponseTopic{{Topic: kmsg.StringPtr("t"), Partitions: []kmsg.MetadataResponseTopicPartition{{Partition: 0, Leader: 1, Replicas: []int32{1}, ISR: []int32{1}}}}}
			resp = r.AppendTo(nil)
		case 0: // Produce
			pr := kmsg.ProduceRequest{Version: ver}
			if err := pr.ReadFrom(body); err != nil {
				return
			}
			r := kmsg.ProduceResponse{Version: ver}
			for _, tp := range pr.Topics {
				rt := kmsg.ProduceResponseTopic{Topic: tp.Topic}
				for _, p := range tp.Partitions {
					b.mu.Lock()
					b.produced = append(b.produced, append([]byte{}, p.Records...))
					b.versions = append(b.versions, ver)
					rt.Partitions = append(rt.Partitions, kmsg.ProduceResponseTopicPartition{Partition: p.Partition, BaseOffset: b.next, LogAppendTime: -1})
					b.next += 1000
					b.mu.Unlock()
				}
				r.Topics = append(r.Topics, rt)
			}
			resp = r.AppendTo(nil)
		default:
			return
		}
		out := binary.BigEndian.AppendUint32(nil, uint32(4+len(resp)))
		out = append(append(out, corr...), resp...)
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// TestRealClientEncoder produces with franz-go at three protocol eras and
// every codec, then runs what the client actually sent through this package.
func TestRealClientEncoder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a client")
	}
	codecs := map[int8]kgo.CompressionCodec{
		CodecNone: kgo.NoCompression(), CodecGzip: kgo.GzipCompression(), CodecSnappy: kgo.SnappyCompression(),
		CodecLZ4: kgo.Lz4Compression(), CodecZstd: kgo.ZstdCompression(),
	}
	eras := []struct {
		name     string
		versions *kversion.Versions
		magic    int8 // 2 = RecordBatch
	}{{"0.9 MessageSet v0", kversion.V0_9_0(), 0}, {"0.10.2 MessageSet v1", kversion.V0_10_2(), 1}, {"2.1 RecordBatch", kversion.V2_1_0(), 2}}
	for _, era := range eras {
		for codec, cc := range codecs {
			if era.magic < 2 && codec == CodecZstd {
				continue
			}
			t.Run(fmt.Sprintf("%s/codec%d", era.name, codec), func(t *testing.T) {
				br := newCaptureBroker(t)
				cl, err := kgo.NewClient(kgo.SeedBrokers(br.ln.Addr().String()), kgo.MaxVersions(era.versions),
					kgo.DisableIdempotentWrite(), kgo.ProducerBatchCompression(cc), kgo.ProducerLinger(50*time.Millisecond),
					kgo.DefaultProduceTopic("t"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
				require.NoError(t, err)
				defer cl.Close()
				var recs []*kgo.Record
				for i := range 50 {
					r := &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "value %d %0100d", i, i), Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i))}
					if i == 3 {
						r.Key = nil
					}
					if era.magic == 2 && i == 5 {
						r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}
					}
					recs = append(recs, r)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())

				br.mu.Lock()
				defer br.mu.Unlock()
				require.NotEmpty(t, br.produced)
				var stored []byte
				for i, raw := range br.produced {
					var v2 []byte
					if era.magic == 2 {
						require.GreaterOrEqual(t, br.versions[i], int16(3))
						info, err := ValidateV2(raw, 1<<20)
						require.NoError(t, err)
						require.True(t, info.Codecs.Has(codec))
						v2 = raw
					} else {
						require.Equal(t, era.magic, int8(raw[16]), "client sent magic %d", raw[16])
						if codec != CodecNone {
							require.EqualValues(t, codec, raw[17]&7, "client compressed")
						}
						var info Info
						v2, info, err = FromMessageSet(raw, 1<<20, 64<<20)
						require.NoError(t, err)
						if codec != CodecNone {
							require.True(t, info.Codecs.Has(codec), "codec kept")
						}
					}
					for _, batch := range Batches(v2) {
						require.NoError(t, CheckRecords(batch, 64<<20))
					}
					stored = append(stored, v2...)
				}
				StampBaseOffsets(stored, 0)
				got := decodeV2(t, stored)
				require.Len(t, got, len(recs))
				for i, g := range got {
					require.EqualValues(t, i, g.Offset)
					require.Equal(t, string(recs[i].Key), string(g.Key))
					require.Equal(t, recs[i].Key == nil, g.Key == nil)
					require.Equal(t, string(recs[i].Value), string(g.Value))
					if era.magic > 0 {
						require.Equal(t, recs[i].Timestamp.UnixMilli(), g.Ts)
					}
				}
				for _, magic := range []int8{0, 1} {
					ms, err := ToMessageSet(stored, magic)
					require.NoError(t, err)
					msgs, _ := decodeMessageSet(t, ms)
					require.Len(t, msgs, len(recs))
				}
			})
		}
	}
}
