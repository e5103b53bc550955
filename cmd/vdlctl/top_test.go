package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/kafka"
	"github.com/vdl-project/vdl/kafka/group"
)

// vdlctl top against a fake admin API whose stream grows by 1000 records
// and whose group commits 500 more at every refresh: the rates printed are
// positive and in that proportion, the first view has none.
func TestTop(t *testing.T) {
	var calls atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		n := calls.Add(1)
		_ = json.NewEncoder(w).Encode(map[string]any{"node_id": 2, "streams": []map[string]any{{
			"name": "demo", "leader": 2, "role": "StateLeader", "term": 3, "start_offset": 0,
			"high_watermark": 1000 * n, "voters": []int{3, 1, 2}, "in_sync": []int{2, 1},
		}}})
	})
	mux.HandleFunc("GET /groups", func(w http.ResponseWriter, _ *http.Request) {
		n := calls.Load()
		st := kafka.CoordinatorStatus{Coordinator: true, OffsetsTopic: "__consumer_offsets", Groups: []kafka.GroupStatus{{
			Summary: group.Summary{Group: "g1", State: "Stable"},
			Offsets: []kafka.OffsetStatus{{Topic: "demo", Offset: 500 * n, HighWater: 1000 * n, Lag: 500 * n}},
		}}}
		_ = json.NewEncoder(w).Encode(st)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	code, out, errOut := vdlctl("--admin", srv.URL, "top", "--count", "3", "--interval", "100ms", "--plain")
	require.Equal(t, 0, code, errOut)
	views := regexp.MustCompile(`(?m)^vdl top — node 2`).FindAllStringIndex(out, -1)
	require.Len(t, views, 3, out)
	first := out[:views[1][0]]
	require.Regexp(t, `demo\s+n2\s+Leader\s+3\s+0\s+1000\s+-\s+n1,n2\s+n1,n2,n3`, first, "no rate before a second refresh")
	rates := regexp.MustCompile(`demo\s+n2\s+Leader\s+3\s+0\s+\d+\s+([0-9.]+)`).FindAllStringSubmatch(out, -1)
	require.Len(t, rates, 2, out)
	consume := regexp.MustCompile(`g1\s+Stable\s+0\s+demo\s+\d+\s+\d+\s+([0-9.]+)`).FindAllStringSubmatch(out, -1)
	require.Len(t, consume, 2, out)
	for i := range rates {
		var p, c float64
		require.NoError(t, json.Unmarshal([]byte(rates[i][1]), &p))
		require.NoError(t, json.Unmarshal([]byte(consume[i][1]), &c))
		require.Greater(t, p, 0.0)
		require.InDelta(t, p/2, c, p*0.01, "the group commits half as fast as the stream grows")
	}

	code, _, errOut = vdlctl("--admin", srv.URL, "top", "--interval", "0s")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--interval must be positive")
}
