package campaign

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vdl-project/vdl/checker"
)

// The progress line counts each op once, when it completes (ops complete
// out of order), keeps the still open ones apart, and counts two values
// acknowledged at one offset as an anomaly.
func TestProgressLine(t *testing.T) {
	r := &runner{t0: time.Now(), clients: map[int]string{}}
	r.history = checker.NewRecorder(r.now)
	produce := func(conn int, v string) *checker.Handle {
		return r.history.Invoke(checker.Op{Kind: checker.KindProduce, Stream: "s1", Client: conn, Conn: conn, Value: v})
	}
	time.Sleep(time.Millisecond)
	a, b, c := produce(1, "a"), produce(2, "b"), produce(3, "c")
	time.Sleep(time.Millisecond)
	b.ProduceOK(0)
	require.Contains(t, r.progressLine(), "ops ok=1 failed=0 unknown=0 in-flight=2 | faults: none | anomalies so far: 0")
	a.Info("timeout", false)
	c.Fail("refused")
	d := produce(4, "d")
	time.Sleep(time.Millisecond)
	d.ProduceOK(0) // b was acknowledged at 0 too
	require.Contains(t, r.progressLine(), "ops ok=2 failed=1 unknown=1 in-flight=0 | faults: none | anomalies so far: 1")
	r.openFault(nodeKey(2), "pause", "n2")
	require.Contains(t, r.progressLine(), "ops ok=2 failed=1 unknown=1 in-flight=0 | faults: pause n2 | anomalies so far: 1")
}
