package kafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vdl-project/vdl/kafka"
)

func deleteReq(topic string, offsets ...int64) *kmsg.DeleteRecordsRequest {
	r := kmsg.NewPtrDeleteRecordsRequest()
	r.Version, r.TimeoutMillis = 1, 5000
	t := kmsg.NewDeleteRecordsRequestTopic()
	t.Topic = topic
	for _, o := range offsets {
		p := kmsg.NewDeleteRecordsRequestTopicPartition()
		p.Offset = o
		t.Partitions = append(t.Partitions, p)
	}
	r.Topics = append(r.Topics, t)
	return r
}

// DeleteRecords answers per partition: past the high watermark or below
// -1 → OFFSET_OUT_OF_RANGE, -1 → the high watermark, at or below the start
// → the start unchanged, a partition twice → INVALID_REQUEST, the offsets
// stream → INVALID_TOPIC_EXCEPTION, an unknown stream →
// UNKNOWN_TOPIC_OR_PARTITION; a fetch below the new start is out of range.
func TestDeleteRecordsAnswers(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	h.produceOK(8, "a", vals(10, "v")...)
	h.be.AddStream(kafka.DefaultOffsetsTopic)
	for _, c := range []struct {
		topic string
		offs  []int64
		codes []int16
		low   []int64
	}{
		{"a", []int64{11}, []int16{kerr.OffsetOutOfRange.Code}, []int64{-1}},
		{"a", []int64{-2}, []int16{kerr.OffsetOutOfRange.Code}, []int64{-1}},
		{"a", []int64{4, 4}, []int16{0, kerr.InvalidRequest.Code}, []int64{4, -1}},
		{"a", []int64{2}, []int16{0}, []int64{4}},
		{"a", []int64{-1}, []int16{0}, []int64{10}},
		{"nope", []int64{1}, []int16{kerr.UnknownTopicOrPartition.Code}, []int64{-1}},
		{kafka.DefaultOffsetsTopic, []int64{0}, []int16{kerr.InvalidTopicException.Code}, []int64{-1}},
	} {
		h.send(deleteReq(c.topic, c.offs...))
		got := h.take()
		require.Len(t, got, 1)
		ps := got[0].resp.(*kmsg.DeleteRecordsResponse).Topics[0].Partitions
		for i, p := range ps {
			require.Equal(t, c.codes[i], p.ErrorCode, "%+v #%d", c, i)
			require.Equal(t, c.low[i], p.LowWatermark, "%+v #%d", c, i)
		}
	}
	h.send(fetchReq(11, 0, 0, fetchPart{topic: "a", offset: 9}))
	p := onlyFetchPartition(t, h.take()[0])
	require.Equal(t, kerr.OffsetOutOfRange.Code, p.ErrorCode)
	require.Equal(t, int64(10), p.LogStartOffset)
}

func incAlter(topic string, validate bool, cfgs ...kmsg.IncrementalAlterConfigsRequestResourceConfig) *kmsg.IncrementalAlterConfigsRequest {
	r := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r.Version, r.ValidateOnly = 1, validate
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType, res.ResourceName, res.Configs = kmsg.ConfigResourceTypeTopic, topic, cfgs
	r.Resources = append(r.Resources, res)
	return r
}

func setCfg(op kmsg.IncrementalAlterConfigOp, name, value string) kmsg.IncrementalAlterConfigsRequestResourceConfig {
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = name, op, kmsg.StringPtr(value)
	return c
}

// Config requests: validation errors carry messages and change nothing,
// validate_only changes nothing, SET/DELETE apply, DescribeConfigs reports
// sources and selects names, broker resources are read-only, and
// CreatePartitions is refused.
func TestConfigRequests(t *testing.T) {
	h := newHarness(t, kafka.Config{})
	alter := func(r *kmsg.IncrementalAlterConfigsRequest) kmsg.IncrementalAlterConfigsResponseResource {
		h.send(r)
		got := h.take()
		require.Len(t, got, 1)
		return got[0].resp.(*kmsg.IncrementalAlterConfigsResponse).Resources[0]
	}
	describe := func(names ...string) map[string]kmsg.DescribeConfigsResponseResourceConfig {
		r := kmsg.NewPtrDescribeConfigsRequest()
		r.Version = 2
		res := kmsg.NewDescribeConfigsRequestResource()
		res.ResourceType, res.ResourceName, res.ConfigNames = kmsg.ConfigResourceTypeTopic, "a", names
		r.Resources = append(r.Resources, res)
		h.send(r)
		rr := h.take()[0].resp.(*kmsg.DescribeConfigsResponse).Resources[0]
		require.Equal(t, int16(0), rr.ErrorCode)
		out := map[string]kmsg.DescribeConfigsResponseResourceConfig{}
		for _, c := range rr.Configs {
			out[c.Name] = c
		}
		return out
	}
	for _, c := range []kmsg.IncrementalAlterConfigsRequestResourceConfig{
		setCfg(kmsg.IncrementalAlterConfigOpSet, "cleanup.policy", "compact,delete"),
		setCfg(kmsg.IncrementalAlterConfigOpSet, "retention.ms", "-2"),
		setCfg(kmsg.IncrementalAlterConfigOpSet, "max.message.bytes", "x"),
		setCfg(kmsg.IncrementalAlterConfigOpSet, "segment.bytes", "1"),
		setCfg(kmsg.IncrementalAlterConfigOpAppend, "cleanup.policy", "compact"),
		setCfg(kmsg.IncrementalAlterConfigOpSubtract, "cleanup.policy", "delete"),
	} {
		r := alter(incAlter("a", false, setCfg(kmsg.IncrementalAlterConfigOpSet, "retention.bytes", "5"), c))
		require.Equal(t, kerr.InvalidConfig.Code, r.ErrorCode, "%s %v", c.Name, c.Op)
		require.NotEmpty(t, *r.ErrorMessage)
	}
	require.Equal(t, kmsg.ConfigSourceDefaultConfig, describe()["retention.bytes"].Source, "nothing of a refused resource applied")
	require.Equal(t, int16(0), alter(incAlter("a", true, setCfg(kmsg.IncrementalAlterConfigOpSet, "retention.ms", "5"))).ErrorCode)
	require.Equal(t, "604800000", *describe()["retention.ms"].Value, "validate_only changes nothing")
	require.Equal(t, int16(0), alter(incAlter("a", false, setCfg(kmsg.IncrementalAlterConfigOpSet, "retention.ms", "5"),
		setCfg(kmsg.IncrementalAlterConfigOpAppend, "cleanup.policy", "delete"))).ErrorCode)
	d := describe("retention.ms", "cleanup.policy")
	require.Len(t, d, 2)
	require.Equal(t, "5", *d["retention.ms"].Value)
	require.Equal(t, kmsg.ConfigSourceDynamicTopicConfig, d["retention.ms"].Source)
	require.False(t, d["retention.ms"].IsDefault)
	require.Equal(t, int16(0), alter(incAlter("a", false, setCfg(kmsg.IncrementalAlterConfigOpDelete, "retention.ms", ""))).ErrorCode)
	require.Equal(t, kmsg.ConfigSourceDefaultConfig, describe()["retention.ms"].Source)
	require.Equal(t, kerr.UnknownTopicOrPartition.Code, alter(incAlter("nope", false, setCfg(kmsg.IncrementalAlterConfigOpSet, "retention.ms", "5"))).ErrorCode)

	// Broker resources: described read-only, never altered.
	br := incAlter("1", false, setCfg(kmsg.IncrementalAlterConfigOpSet, "num.partitions", "3"))
	br.Resources[0].ResourceType = kmsg.ConfigResourceTypeBroker
	require.Equal(t, kerr.InvalidConfig.Code, alter(br).ErrorCode)
	dr := kmsg.NewPtrDescribeConfigsRequest()
	dr.Version = 2
	res := kmsg.NewDescribeConfigsRequestResource()
	res.ResourceType, res.ResourceName = kmsg.ConfigResourceTypeBroker, "1"
	dr.Resources = append(dr.Resources, res)
	res.ResourceName = "2"
	dr.Resources = append(dr.Resources, res)
	h.send(dr)
	rs := h.take()[0].resp.(*kmsg.DescribeConfigsResponse).Resources
	require.Equal(t, int16(0), rs[0].ErrorCode)
	require.True(t, rs[0].Configs[0].ReadOnly)
	require.Equal(t, kerr.InvalidRequest.Code, rs[1].ErrorCode, "another broker's resource")

	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.Version = 1
	ct := kmsg.NewCreatePartitionsRequestTopic()
	ct.Topic, ct.Count = "a", 3
	cp.Topics = append(cp.Topics, ct)
	h.send(cp)
	rt := h.take()[0].resp.(*kmsg.CreatePartitionsResponse).Topics[0]
	require.Equal(t, kerr.InvalidPartitions.Code, rt.ErrorCode)
	require.Contains(t, *rt.ErrorMessage, "one partition")
}
