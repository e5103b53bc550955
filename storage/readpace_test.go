package storage

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/vdl-project/vdl/vfs"
)

func first[A, B any](a A, _ B) A { return a }

// pacerClock drives a yieldPacer through steps of exactly known syncs and
// reads.
type pacerClock struct {
	p   *yieldPacer
	now time.Time
}

func newPacerClock() *pacerClock {
	c := &pacerClock{p: &yieldPacer{}, now: time.Unix(1000, 0)}
	c.p.pace(c.now) // the first step starts here
	return c
}

// step spreads syncs (their durations) and read bytes over one yieldStep
// and returns the pace right after it.
func (c *pacerClock) step(syncs []time.Duration, read int64) int64 {
	start := c.now
	dt := yieldStep / time.Duration(len(syncs)+2)
	if read > 0 {
		c.now = c.now.Add(dt / 2)
		c.p.noteRead(c.now, read)
	}
	for i, d := range syncs {
		c.p.noteSync(start.Add(dt*time.Duration(i+1)), d)
	}
	c.now = start.Add(yieldStep)
	return c.p.pace(c.now)
}

// syncsOf returns n syncs of d of which slow take slowD.
func syncsOf(n int, d time.Duration, slow int, slowD time.Duration) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
		if i < slow {
			s[i] = slowD
		}
	}
	return s
}

const mibps = int64(1 << 20) // 1 MiB/s, in bytes/s

// Catch-up reads are paced while they slow the writes down — more than
// one sync in a hundred past twice the quiet baseline — at half what they
// read, halving again while it lasts; a step where the writes keep their
// pace raises the rate by a quarter, up to not paced at all.
func TestYieldPacerHalvesWhileWritesWait(t *testing.T) {
	c := newPacerClock()
	require.Zero(t, c.step(syncsOf(100, time.Millisecond, 0, 0), 0), "quiet: learns the baseline")
	require.Equal(t, time.Millisecond, c.p.base)

	// 10 MiB in a step of 100 ms: 100 MiB/s; 2 of 100 syncs at 10 ms.
	require.Equal(t, 50*mibps, c.step(syncsOf(100, time.Millisecond, 2, 10*time.Millisecond), 10<<20))
	require.Equal(t, 25*mibps, c.step(syncsOf(100, time.Millisecond, 2, 10*time.Millisecond), 5<<20))
	// One in a hundred slow is within the target: raised by a quarter.
	require.Equal(t, 25*mibps*5/4, c.step(syncsOf(100, time.Millisecond, 1, 10*time.Millisecond), 2<<20))
	// A sync past twice the baseline but not yieldSlack more is not slow.
	require.Equal(t, 25*mibps*25/16, c.step(syncsOf(100, time.Millisecond, 50, 5*time.Millisecond), 2<<20))
	for range 10 {
		c.step(syncsOf(100, time.Millisecond, 10, 20*time.Millisecond), 1<<20)
	}
	require.Equal(t, int64(yieldFloor), c.p.rate, "a catch-up always moves")
	for c.p.rate != 0 {
		r := c.p.rate
		if next := c.step(syncsOf(100, time.Millisecond, 0, 0), 1<<20); next != 0 {
			require.Equal(t, r+r/4, next, "raised back by a quarter")
		} else {
			require.GreaterOrEqual(t, r+r/4, int64(yieldCeil), "unpaced past the ceiling")
		}
	}
	require.Equal(t, time.Millisecond, c.p.base, "steps with reads leave the baseline")
}

// No baseline, no pacing: slow syncs while reads ran from the start say
// nothing about what the reads cost. A step with no catch-up read or no
// write lifts the pace at once.
func TestYieldPacerLiftsWithNothingToYieldTo(t *testing.T) {
	c := newPacerClock()
	require.Zero(t, c.step(syncsOf(100, 10*time.Millisecond, 100, 10*time.Millisecond), 10<<20))
	require.Zero(t, c.step(syncsOf(100, time.Millisecond, 0, 0), 0))
	require.Equal(t, 50*mibps, c.step(syncsOf(100, time.Millisecond, 5, 9*time.Millisecond), 10<<20))
	require.Zero(t, c.step(syncsOf(100, time.Millisecond, 0, 0), 0), "reads stopped: unpaced")
	require.Equal(t, 50*mibps, c.step(syncsOf(100, time.Millisecond, 5, 9*time.Millisecond), 10<<20))

	// No writes for a second: nothing to yield to.
	c.now = c.now.Add(yieldMaxStep / 2)
	c.p.noteRead(c.now, 10<<20)
	c.now = c.now.Add(yieldMaxStep / 2)
	require.Zero(t, c.p.pace(c.now))
}

// A step lasts until yieldSamples syncs were seen, or yieldMaxStep: at a
// few writes a second, one slow sync in ten is not taken for a trend, two
// in a hundred are.
func TestYieldPacerWaitsForSamples(t *testing.T) {
	for _, slow := range []int{1, 2} {
		c := newPacerClock()
		c.step(syncsOf(100, time.Millisecond, 0, 0), 0)
		var pace int64
		for i := range 10 { // slow syncs in the first steps
			pace = c.step(syncsOf(10, time.Millisecond, min(max(slow-i, 0), 1), 9*time.Millisecond), 1<<20)
			if i < 9 {
				require.Zero(t, pace)
				require.Equal(t, 10*(i+1), c.p.syncs, "the step goes on")
			}
		}
		if slow == 1 {
			require.Zero(t, pace, "one in a hundred")
		} else {
			require.Equal(t, int64(yieldFloor), pace, "two in a hundred: 10 MiB in a second, halved")
		}
		require.Zero(t, c.p.syncs, "a new step")
	}
}

// The budget paces reads at the lower of the operator's cap and the
// yielding rate, and the logs sharing it report their syncs of new
// writes to it (only those: a sync with nothing new is no sample).
func TestReadBudgetYields(t *testing.T) {
	b := NewReadBudget(0, 64<<20, true)
	now := time.Now()
	pace := func() (int64, bool) { return b.paceLocked(now) }
	b.mu.Lock()
	require.Equal(t, int64(64<<20), first(pace()), "the fixed cap")
	b.yield.rate = 16 << 20
	require.Equal(t, int64(16<<20), first(pace()))
	b.yield.rate = 128 << 20
	require.Equal(t, int64(64<<20), first(pace()))
	b.next = time.Time{}
	require.Zero(t, b.delayLocked(1<<20, now), "the first read starts at once")
	require.Equal(t, time.Second/64, b.delayLocked(1<<20, now), "the next after 1 MiB at 64 MiB/s")
	for range 100 {
		b.delayLocked(1<<20, now)
	}
	require.Greater(t, b.delayLocked(1<<20, now), time.Second, "the fixed cap holds however long the queue")
	b.yield.rate, b.next = 8<<20, time.Time{}
	for range 100 {
		require.LessOrEqual(t, b.delayLocked(1<<20, now), yieldMaxDelay, "yielding: late, not outwaiting a client")
	}
	b.yield.rate = 128 << 20
	b.mu.Unlock()
	require.Equal(t, int64(64<<20), b.Pace())
	require.Equal(t, int64(64<<20)/10, b.aheadWindow(32<<20), "paced: the kernel reads ahead a tenth of a second")
	require.Equal(t, int64(readPiece), NewReadBudget(0, 1<<20, false).aheadWindow(32<<20), "a read's worth at least")
	require.Equal(t, int64(DefaultCatchUpReadBytes), NewReadBudget(0, 0, true).aheadWindow(32<<20), "not paced: the budget")

	l := openMem(t, Options{FS: vfs.NewMem(), Dir: "/d", Stream: 1, ReadBudget: b})
	defer l.Close()
	syncs := func() int { b.mu.Lock(); defer b.mu.Unlock(); return b.yield.syncs }
	before := syncs()
	require.NoError(t, l.Write([]*pb.Entry{userEnt(1, 1, 1, 100, 1)}, hardState(1, 1, 1)))
	_, err := l.Sync()
	require.NoError(t, err)
	require.Equal(t, before+1, syncs())
	_, err = l.Sync()
	require.NoError(t, err)
	require.Equal(t, before+1, syncs(), "nothing new written: no sample")

	var none *ReadBudget
	require.Zero(t, none.Pace())
	none.noteSync(time.Second)
}
