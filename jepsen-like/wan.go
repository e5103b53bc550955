package campaign

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The userspace WAN: where the kernel has no tc netem (sch_netem), the
// latency, jitter and loss between DCs are applied by this process. In
// the router namespace, a TUN device (wanIf) takes what one DC's bridge
// forwards to another DC (policy routing: `ip rule iif brD lookup 100+D`,
// whose table routes the other DCs' subnets to the TUN device); a
// goroutine reads each packet, drops it with the (srcDC, dstDC) loss rate
// or holds it for the matrix's delay plus jitter, then writes it back
// into the TUN device, whence the main table forwards it to its DC's
// bridge. The device, rules and routes live in the router namespace and
// go with it (Close, Sweep); the device also goes when the process's
// descriptor closes.
//
// Jitter never reorders a (src, dst) pair's packets (TCP would take a
// reordering for loss): the jitter of a pair wanders smoothly, from one
// normally drawn value (deviation jitter_ms) to the next over
// max(20 ms, 5 × jitter), so that close packets get close delays and the
// release times keep their order; and a packet is never released before
// the previous one of its pair. (A fresh draw per packet under the
// no-earlier rule would climb to the distribution's tail on a busy link.)

// wanIf is the TUN device's name inside the router namespace (the
// namespace is the run's own: no collision with other runs).
const wanIf = "wan0"

// wanTableBase + D is the routing table of what DC D's bridge forwards.
const wanTableBase = 100

// Shapers: how a topology applies its latency matrix.
const (
	ShaperAuto      = ""          // netem when the kernel has it, else the userspace WAN
	ShaperNetem     = "netem"     // tc netem on the servers' interfaces, nft for loss
	ShaperUserspace = "userspace" // the userspace WAN (TUN) in the router namespace
)

// wanPacket is a packet held until due.
type wanPacket struct {
	due  time.Time
	seq  uint64 // FIFO among equal due times
	data []byte
}

type wanQueue []*wanPacket

func (q wanQueue) Len() int { return len(q) }
func (q wanQueue) Less(i, j int) bool {
	if q[i].due.Equal(q[j].due) {
		return q[i].seq < q[j].seq
	}
	return q[i].due.Before(q[j].due)
}
func (q wanQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *wanQueue) Push(x any)   { *q = append(*q, x.(*wanPacket)) }
func (q *wanQueue) Pop() any {
	old := *q
	p := old[len(old)-1]
	*q = old[:len(old)-1]
	return p
}

// wanSched decides each packet's fate: dropped, or when it leaves.
type wanSched struct {
	lat    [][]float64 // one-way ms, [src-1][dst-1]
	loss   [][]float64 // percent
	jitter float64     // ms, the normal distribution's deviation
	rng    *rand.Rand
	last   map[[2]int]time.Time // the last release of each (src, dst)
	walk   map[[2]int]*jitterWalk
}

// jitterWalk is a pair's jitter: j0 at t0 to j1 at t1, linearly.
type jitterWalk struct {
	t0, t1 time.Time
	j0, j1 float64
}

// jitterAt is the pair's jitter (ms) at now.
func (s *wanSched) jitterAt(pair [2]int, now time.Time) float64 {
	span := time.Duration(max(20, 5*s.jitter) * float64(time.Millisecond))
	w := s.walk[pair]
	if w == nil {
		w = &jitterWalk{t0: now, t1: now.Add(span), j0: s.rng.NormFloat64() * s.jitter, j1: s.rng.NormFloat64() * s.jitter}
		s.walk[pair] = w
	}
	if now.After(w.t1.Add(span)) { // idle for a while: start again from here
		w.t0, w.t1, w.j0, w.j1 = now, now.Add(span), w.j1, s.rng.NormFloat64()*s.jitter
	}
	for !now.Before(w.t1) {
		w.t0, w.t1, w.j0, w.j1 = w.t1, w.t1.Add(span), w.j1, s.rng.NormFloat64()*s.jitter
	}
	return w.j0 + (w.j1-w.j0)*float64(now.Sub(w.t0))/float64(span)
}

func newWANSched(spec NetSpec, seed uint64) *wanSched {
	return &wanSched{lat: spec.LatencyMillis, loss: spec.LossPercent, jitter: spec.JitterMillis,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), last: map[[2]int]time.Time{}, walk: map[[2]int]*jitterWalk{}}
}

// due is when a packet from DC src to DC dst (1-based) received at now
// leaves, or false when it is lost. Packets within a DC, or to or from
// outside the matrix, leave at once.
func (s *wanSched) due(now time.Time, src, dst int) (time.Time, bool) {
	if src == dst || src < 1 || dst < 1 {
		return now, true
	}
	if s.loss != nil && src <= len(s.loss) && dst <= len(s.loss[src-1]) {
		if p := s.loss[src-1][dst-1]; p > 0 && s.rng.Float64()*100 < p {
			return time.Time{}, false
		}
	}
	var ms float64
	if s.lat != nil && src <= len(s.lat) && dst <= len(s.lat[src-1]) {
		ms = s.lat[src-1][dst-1]
	}
	pair := [2]int{src, dst}
	if ms > 0 && s.jitter > 0 {
		ms += s.jitterAt(pair, now)
	}
	at := now.Add(time.Duration(max(ms, 0) * float64(time.Millisecond)))
	if prev := s.last[pair]; at.Before(prev) {
		at = prev
	}
	s.last[pair] = at
	return at, true
}

// WAN is a running userspace WAN.
type WAN struct {
	tun   *os.File
	octet int
	sched *wanSched

	mu    sync.Mutex
	q     wanQueue
	seq   uint64
	wake  chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup
	close sync.Once

	// Forwarded and Dropped count the packets between DCs.
	Forwarded, Dropped atomic.Int64
}

// openTUN creates the TUN device name in the network namespace ns
// (/run/netns/ns) and returns its descriptor (non-blocking, so that Close
// ends a Read). A locked thread enters the namespace and leaves it; if it
// cannot leave, its goroutine ends locked and the runtime discards it.
func openTUN(ns, name string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("the thread's namespace: %w", err)}
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("namespace %s: %w", ns, err)}
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		f, err := tunDevice(name)
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and goes with this goroutine
		ch <- result{f, err}
	}()
	r := <-ch
	return r.f, r.err
}

func tunDevice(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("/dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

// startWAN creates the TUN device in the router namespace, routes what
// each DC's bridge forwards to another DC through it, and serves it.
func (t *Topology) startWAN() error {
	r := t.router
	f, err := openTUN(r, wanIf)
	if err != nil {
		return err
	}
	w := &WAN{tun: f, octet: t.octet, sched: newWANSched(t.spec, uint64(t.octet)), wake: make(chan struct{}, 1), done: make(chan struct{})}
	t.wan = w
	w.wg.Add(2)
	go w.readLoop()
	go w.writeLoop()
	cmds := [][]string{
		{"ip", "-n", r, "link", "set", wanIf, "mtu", "1500", "txqueuelen", "10000", "up"},
		{"ip", "netns", "exec", r, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
			"net.ipv4.conf." + wanIf + ".rp_filter=0"},
	}
	for dc := 1; dc <= t.spec.DCs; dc++ {
		table := fmt.Sprint(wanTableBase + dc)
		cmds = append(cmds, []string{"ip", "-n", r, "rule", "add", "pref", table, "iif", fmt.Sprintf("br%d", dc), "lookup", table})
		for other := 1; other <= t.spec.DCs; other++ {
			if other != dc {
				cmds = append(cmds, []string{"ip", "-n", r, "route", "add", fmt.Sprintf("10.%d.%d.0/24", t.octet, other), "dev", wanIf, "table", table})
			}
		}
	}
	for _, c := range cmds {
		if err := run(c...); err != nil {
			return err
		}
	}
	return nil
}

// dcOf is the DC of an address 10.<octet>.<dc>.x of this run, 0 for
// any other.
func (w *WAN) dcOf(ip []byte) int {
	if ip[0] != 10 || int(ip[1]) != w.octet {
		return 0
	}
	return int(ip[2])
}

func (w *WAN) readLoop() {
	defer w.wg.Done()
	buf := make([]byte, 65536)
	for {
		n, err := w.tun.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			select {
			case <-w.done:
				return
			default:
			}
			time.Sleep(time.Millisecond) // a transient error: the next packet
			continue
		}
		if n < 20 || buf[0]>>4 != 4 {
			continue // not IPv4: nothing of the run's
		}
		now := time.Now()
		src, dst := w.dcOf(buf[12:16]), w.dcOf(buf[16:20])
		w.mu.Lock()
		at, ok := w.sched.due(now, src, dst)
		if !ok {
			w.mu.Unlock()
			w.Dropped.Add(1)
			continue
		}
		w.seq++
		heap.Push(&w.q, &wanPacket{due: at, seq: w.seq, data: append([]byte(nil), buf[:n]...)})
		first := w.q[0].seq == w.seq
		w.mu.Unlock()
		if first {
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (w *WAN) writeLoop() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		w.mu.Lock()
		var ready []*wanPacket
		now := time.Now()
		for len(w.q) > 0 && !w.q[0].due.After(now) {
			ready = append(ready, heap.Pop(&w.q).(*wanPacket))
		}
		wait := time.Hour
		if len(w.q) > 0 {
			wait = w.q[0].due.Sub(now)
		}
		w.mu.Unlock()
		for _, p := range ready {
			if _, err := w.tun.Write(p.data); err == nil {
				w.Forwarded.Add(1)
			}
		}
		if len(ready) > 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-w.done:
			return
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// Close stops the WAN and closes the TUN device (which removes it).
func (w *WAN) Close() error {
	var err error
	w.close.Do(func() {
		close(w.done)
		err = w.tun.Close()
		w.wg.Wait()
	})
	return err
}
