package kafka

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pingcap/failpoint"

	"github.com/vdl-project/vdl/failpoints"
)

// Server is the TCP driver of the Kafka front end. Per connection it runs a
// reader goroutine (frames → events; it blocks, and so stops reading the
// socket, while the session is at its in-flight bound) and one loop
// goroutine that owns the connection's Session, feeds it frames, produce
// completions, high-watermark wake-ups and deadline ticks, and writes the
// ready responses with one write per batch.
type Server struct {
	cfg    Config
	be     Backend
	log    *slog.Logger
	start  time.Time
	groups *Groups

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	perIP     map[string]int // open connections by remote address
	closed    bool
	closing   chan struct{}
	nconns    atomic.Int64
	wg        sync.WaitGroup
	budget    *budget // request bytes held, across connections
}

// NewServer checks cfg and returns a server; nothing runs until Serve.
func NewServer(cfg Config, be Backend, logger *slog.Logger) (*Server, error) {
	cfg, _, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	s := &Server{
		cfg: cfg, be: be, log: logger.With("component", "kafka"), start: time.Now(),
		listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{}, perIP: map[string]int{},
		closing: make(chan struct{}), budget: newBudget(int64(cfg.MaxRequestBytes)),
	}
	gc := cfg.groupsConfig()
	gc.Group.Nonce = strconv.FormatInt(s.start.UnixNano(), 36)
	startMs := s.start.UnixMilli()
	gc.Wall = func(now int64) int64 { return startMs + now/1e6 }
	s.groups = NewGroups(gc, be)
	s.wg.Add(1)
	go s.tickGroups()
	return s, nil
}

// RequestBytesHeld returns the bytes of requests the server holds now,
// across connections (bounded by Config.MaxRequestBytes).
func (s *Server) RequestBytesHeld() int64 { return s.budget.inUse() }

// Groups returns the server's group coordinator.
func (s *Server) Groups() *Groups { return s.groups }

// Now returns the driver's clock (ns since the server was created), the
// time base of Groups.
func (s *Server) Now() int64 { return s.now() }

// tickGroups drives the coordinator's timeouts (sessions expire even when
// no member calls) and notices lost leadership of the offsets stream.
func (s *Server) tickGroups() {
	defer s.wg.Done()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			s.groups.Tick(s.now())
		}
	}
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = errors.New("kafka: server closed")

// Listener is what one listener of a server has of its own.
type Listener struct {
	// Name labels its connections in metrics (Config.Observer); default
	// "kafka".
	Name string
	// SASL, if set, makes its clients authenticate first (Config.SASL).
	SASL Authenticator
	// Brokers, if set, is what it advertises (Config.Brokers).
	Brokers func() []Broker
}

// Serve accepts connections on l until Close (then it returns
// ErrServerClosed) or an accept error; its clients authenticate if
// Config.SASL is set.
func (s *Server) Serve(l net.Listener) error {
	return s.ServeWith(l, Listener{SASL: s.cfg.SASL, Brokers: s.cfg.Brokers})
}

// ServeWith is Serve with the listener's own SASL and advertised brokers
// (a TLS listener, say: l is then a tls.Listener).
func (s *Server) ServeWith(l net.Listener, lo Listener) error {
	cfg := s.cfg
	cfg.SASL, cfg.Brokers = lo.SASL, lo.Brokers
	if lo.Name == "" {
		lo.Name = "kafka"
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	s.log.Info("kafka listener started", "addr", l.Addr().String(), "profile", s.cfg.Profile, "sasl", lo.SASL != nil)
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			select {
			case <-s.closing:
				return ErrServerClosed
			default:
			}
			if retryAccept(err) {
				// Out of file descriptors, say: back off and try again,
				// as net/http does, rather than stop serving.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		ip := remoteIP(nc)
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			_ = nc.Close()
			return ErrServerClosed
		case len(s.conns) >= s.cfg.MaxConnections:
			s.mu.Unlock()
			s.log.Warn("connection refused: too many connections", "remote", nc.RemoteAddr().String(), "limit", s.cfg.MaxConnections)
			_ = nc.Close()
			continue
		case s.perIP[ip] >= s.cfg.MaxConnectionsPerIP:
			s.mu.Unlock()
			s.log.Warn("connection refused: too many connections from one address", "remote", nc.RemoteAddr().String(), "limit", s.cfg.MaxConnectionsPerIP)
			_ = nc.Close()
			continue
		}
		c := s.newConn(nc)
		c.ip, c.cfg, c.listener = ip, cfg, lo.Name
		if s.cfg.Observer != nil {
			s.cfg.Observer.Connections(lo.Name, 1)
		}
		s.nconns.Add(1)
		s.perIP[ip]++
		s.conns[c] = struct{}{}
		s.wg.Add(2)
		s.mu.Unlock()
		go c.read()
		go c.loop()
	}
}

// Close stops accepting, lets every connection answer the requests it has
// already read (up to ShutdownGrace), closes them and waits for their
// goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closed = true
	close(s.closing)
	for l := range s.listeners {
		_ = l.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

func (s *Server) now() int64 { return int64(time.Since(s.start)) }

// retryAccept reports whether an accept error is worth retrying: a
// timeout, or resources that may come back (file descriptors, buffers).
func retryAccept(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func remoteIP(nc net.Conn) string {
	if host, _, err := net.SplitHostPort(nc.RemoteAddr().String()); err == nil {
		return host
	}
	return nc.RemoteAddr().String()
}

type conn struct {
	s        *Server
	cfg      Config // the server's, with its listener's SASL and brokers
	nc       net.Conn
	ip       string
	listener string // Listener.Name
	log      *slog.Logger
	frames   chan frame
	rerr     chan error // the reader's final error
	done     chan struct{}
	// authed: the client authenticated (SASL listeners; set by the loop
	// before it writes the answer, read by the reader for the next frame).
	authed atomic.Bool

	mu    sync.Mutex
	compl []Completion
	csig  chan struct{}
	wake  chan struct{}
	bw    *bufio.Writer // writeOut's, for connections without writev
}

func (s *Server) newConn(nc net.Conn) *conn {
	return &conn{
		s: s, nc: nc,
		log:    s.log.With("remote", nc.RemoteAddr().String()),
		frames: make(chan frame),
		rerr:   make(chan error, 1),
		done:   make(chan struct{}),
		csig:   make(chan struct{}, 1),
		wake:   make(chan struct{}, 1),
	}
}

// read turns the socket into frame events. Sending blocks while the loop
// does not take frames (in-flight bound): the socket is not read then. A
// connection that sends no request for IdleTimeout, or takes longer than
// RequestReadTimeout to send the rest of one, is closed; a frame's bytes
// are taken from the server's budget as they arrive (the loop gives them
// back as requests are answered). A frame's announced length is reserved
// whole before its body is read (see readFrame).
func (c *conn) read() {
	defer c.s.wg.Done()
	br := bufio.NewReaderSize(c.nc, 4<<10)
	cfg := c.s.cfg
	for {
		_ = c.nc.SetReadDeadline(time.Now().Add(cfg.IdleTimeout))
		var reserved int64
		f, err := readFrame(br, c.maxFrame,
			func() { _ = c.nc.SetReadDeadline(time.Now().Add(cfg.RequestReadTimeout)) },
			func(n int) error {
				if err := c.s.budget.acquire(int64(n), c.done); err != nil {
					return err
				}
				reserved += int64(n)
				return nil
			})
		if err != nil {
			c.s.budget.release(reserved)
			c.rerr <- err
			return
		}
		select {
		case c.frames <- frame{data: f, readAt: c.s.now()}:
		case <-c.done:
			c.s.budget.release(int64(len(f)))
			return
		}
	}
}

// frame is a request frame and when it was read whole (its queue stage
// starts there).
type frame struct {
	data   []byte
	readAt int64
}

// maxFrame is the largest request frame the client may send now: Kafka's
// limit before SASL authentication (sasl.server.max.receive.size), the
// configured one after.
func (c *conn) maxFrame() int {
	if c.cfg.SASL != nil && !c.authed.Load() {
		return min(MaxPreAuthFrameBytes, c.cfg.MaxFrameBytes)
	}
	return c.cfg.MaxFrameBytes
}

// notify is the session's completion hook: any goroutine, never blocks.
func (c *conn) notify(cp Completion) {
	c.mu.Lock()
	c.compl = append(c.compl, cp)
	c.mu.Unlock()
	select {
	case c.csig <- struct{}{}:
	default:
	}
}

func (c *conn) loop() {
	defer c.s.wg.Done()
	held := 0 // request bytes this connection holds of the server's budget
	defer func() {
		close(c.done)
		_ = c.nc.Close()
		c.s.budget.release(int64(held))
		c.s.mu.Lock()
		delete(c.s.conns, c)
		if c.s.perIP[c.ip]--; c.s.perIP[c.ip] <= 0 {
			delete(c.s.perIP, c.ip)
		}
		c.s.mu.Unlock()
		c.s.nconns.Add(-1)
		if c.s.cfg.Observer != nil {
			c.s.cfg.Observer.Connections(c.listener, -1)
		}
	}()
	sess, err := NewSessionWithGroups(c.cfg, c.s.be, c.s.groups, c.notify)
	if err != nil {
		c.log.Error("cannot start kafka session", "err", err)
		return
	}
	defer sess.Close()
	sess.SetVectored(true)
	if host, _, err := net.SplitHostPort(c.nc.RemoteAddr().String()); err == nil {
		sess.SetClientHost("/" + host)
	}
	watched := map[<-chan struct{}]bool{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	closing := c.s.closing
	var graceEnd <-chan time.Time
	draining := false
	for {
		out := sess.Take()
		if !c.authed.Load() && sess.User() != "" {
			c.authed.Store(true)
		}
		if cur := sess.InFlightBytes(); cur < held {
			c.s.budget.release(int64(held - cur))
			held = cur
		}
		taken := c.s.now()
		if len(out.Data) > 0 || len(out.Vec) > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.cfg.WriteTimeout))
			if err := c.writeOut(out); err != nil {
				c.log.Info("kafka connection closed: write failed", "err", err)
				return
			}
		}
		c.reportTimings(out.Timings, taken)
		if out.Close {
			c.log.Warn("kafka connection closed by server", "reason", out.Reason)
			c.linger()
			return
		}
		if draining && out.Idle {
			return
		}
		for _, ch := range out.Wait {
			if !watched[ch] {
				watched[ch] = true
				go c.watch(ch)
			}
		}
		frames := c.frames
		if out.Paused || draining {
			frames = nil
		}
		var tc <-chan time.Time
		if out.Deadline != 0 {
			d := time.Duration(out.Deadline - c.s.now())
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(max(d, 0))
			tc = timer.C
		}
		select {
		case f := <-frames:
			held += len(f.data)
			failpoint.Inject("beforeRequest", func(val failpoint.Value) {
				failpoints.Hit("kafka/beforeRequest")
				if failpoints.Bool(val) {
					c.log.Warn("kafka connection dropped by failpoint")
					failpoint.Return()
				}
			})
			sess.ReceiveRead(c.s.now(), f.readAt, f.data)
			if c.s.cfg.Observer != nil {
				sess.Handled(c.s.now())
			}
		case <-c.csig:
			c.mu.Lock()
			cs := c.compl
			c.compl = nil
			c.mu.Unlock()
			now := c.s.now()
			for _, cp := range cs {
				sess.ProduceDone(now, cp)
			}
			if len(cs) > 0 {
				failpoint.Inject("afterCommitBeforeResponse", func(val failpoint.Value) {
					failpoints.Hit("kafka/afterCommitBeforeResponse")
					failpoints.CrashOn(val)
				})
			}
		case <-c.wake:
			for ch := range watched {
				select {
				case <-ch:
					delete(watched, ch) // fired: its watcher is gone
				default:
				}
			}
			sess.Poll(c.s.now())
		case <-tc:
			sess.Poll(c.s.now())
		case err := <-c.rerr:
			switch {
			case errors.Is(err, io.EOF), errors.Is(err, net.ErrClosed):
				c.log.Debug("kafka connection closed by client")
			case errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrBadFrame):
				c.log.Warn("kafka connection closed: malformed frame", "err", err)
			default:
				c.log.Info("kafka connection closed: read failed", "err", err)
			}
			return
		case <-closing:
			closing = nil
			draining = true
			graceEnd = time.After(c.s.cfg.ShutdownGrace)
		case <-graceEnd:
			c.log.Info("kafka connection closed at shutdown with requests pending", "pending", sess.Pending())
			return
		}
	}
}

// lingerTime bounds linger.
const lingerTime = time.Second

// linger ends a connection the server closes after its last response: it
// half-closes it (the client reads the responses, then EOF) and discards
// what the client still sends (pipelined requests that get no answer) until
// the client closes its side or lingerTime passes. Closing with unread data
// would reset the connection, and a reset can destroy the responses just
// written before the client reads them.
func (c *conn) linger() {
	if hc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = hc.CloseWrite()
	}
	end := time.After(lingerTime)
	for {
		select {
		case f := <-c.frames:
			c.s.budget.release(int64(len(f.data)))
		case <-c.rerr:
			return
		case <-end:
			return
		}
	}
}

// reportTimings tells the observer about the requests whose responses
// were taken at taken and have just been written.
func (c *conn) reportTimings(ts []RequestTiming, taken int64) {
	if len(ts) == 0 {
		return
	}
	sent := c.s.now()
	for i := range ts {
		ts[i].Taken, ts[i].Sent = max(taken, ts[i].Completed), sent
		c.s.cfg.Observer.RequestDone(&ts[i])
	}
}

func (c *conn) watch(ch <-chan struct{}) {
	select {
	case <-ch:
		select {
		case c.wake <- struct{}{}:
		default:
		}
	case <-c.done:
	}
}
