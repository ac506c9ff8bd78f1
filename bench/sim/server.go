package sim

import (
	"container/list"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"
)

// ErrServerClosed is returned by Serve after Close or Shutdown.
var ErrServerClosed = errors.New("sim: server closed")

// Server is a simulated provider. Create it with New; it is safe for
// concurrent use. Serve it with Serve (its own fasthttp server) or mount
// Handler in another fasthttp server; either way Close ends every request in
// progress.
type Server struct {
	cfg atomic.Pointer[Config] // immutable snapshot, replaced by Update
	seq atomic.Uint64          // arrival counter; seeds per-request generators

	// Lock-free mirrors of running and capacity for per-token load reads.
	runningA atomic.Int64
	capA     atomic.Int64

	abort     chan struct{} // closed by Close or an expired Shutdown
	abortOnce sync.Once

	mu         sync.Mutex // guards everything below up to srv
	raw        Config     // as given to New / Update, before defaults
	steps      []Step
	schedStart time.Time
	capacity   int
	running    int
	queue      list.List // of *ticket, FIFO
	tokens     float64   // rate-limit bucket
	tokensAt   time.Time
	quota      quotaState
	quotas     map[string]*quotaState // by quotaKey, when Quota.Per keeps them apart
	timer      *time.Timer            // fires at the next schedule step
	armed      int                    // index of the step timer is armed for
	timerGen   uint64                 // generation of timer; stale firings are ignored
	closed     bool
	st         Stats
	ttft       *hdrhistogram.Histogram // of streams, µs; see TTFT

	srv     *fasthttp.Server
	life    sync.Mutex // guards lns, conns, stopped
	lns     []net.Listener
	conns   map[net.Conn]struct{}
	serving sync.WaitGroup
	stopped bool
}

// New returns a server for cfg with defaults filled in (see [Config]). The
// capacity schedule starts now.
func New(cfg Config) *Server {
	c := cfg.withDefaults()
	s := &Server{abort: make(chan struct{}), conns: make(map[net.Conn]struct{}), ttft: newTTFTHistogram()}
	s.cfg.Store(&c)
	s.mu.Lock()
	s.raw = cfg
	s.tokens = float64(c.RateLimitBurst)
	s.tokensAt = c.Clock()
	s.resetQuotaLocked(&c)
	s.setScheduleLocked(c.Schedule)
	s.mu.Unlock()

	var logger fasthttp.Logger = discardLogger{}
	if c.Logger != nil {
		logger = c.Logger
	}
	s.srv = &fasthttp.Server{
		Handler:              s.Handler,
		Name:                 "sluice-sim",
		Logger:               logger,
		NoDefaultContentType: true,
		// Streams last as long as they last: no read/write deadlines.
		// Idle keep-alive connections are closed by Shutdown.
		IdleTimeout: time.Minute,
		// fasthttp's worker-pool cleaner notices the end of Serve only
		// after sleeping this long; keep it short so that the last
		// goroutine of a closed server is gone soon after Close.
		MaxIdleWorkerDuration: 100 * time.Millisecond,
		ConnState:             s.connState,
	}
	return s
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}

// Config returns the configuration in force, defaults filled in. Its
// Schedule is the one last set (by New, SetSchedule or SetCapacity).
func (s *Server) Config() Config {
	c := *s.cfg.Load()
	s.mu.Lock()
	c.Schedule = append([]Step(nil), s.steps...)
	s.mu.Unlock()
	return c
}

// Update changes model parameters at run time. fn gets a copy of the
// configuration as last given (before defaults, so a zero field still means
// "default") and may change any field except Schedule (use SetSchedule),
// TimeScale, Seed, Clock and Logger, whose changes are ignored. Each request
// uses the snapshot in force at its arrival for its whole life. Changing the
// rate limit refills the bucket.
func (s *Server) Update(fn func(*Config)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.cfg.Load()
	raw := s.raw
	fn(&raw)
	raw.Schedule, raw.TimeScale, raw.Seed, raw.Clock, raw.Logger = s.raw.Schedule, s.raw.TimeScale, s.raw.Seed, s.raw.Clock, s.raw.Logger
	s.raw = raw
	c := raw.withDefaults()
	c.Schedule = old.Schedule
	if c.RateLimitBurst != old.RateLimitBurst || c.RateLimitRPS != old.RateLimitRPS {
		s.tokens = float64(c.RateLimitBurst)
		s.tokensAt = c.Clock()
	}
	if c.Quota.RPM != old.Quota.RPM || c.Quota.TPM != old.Quota.TPM {
		s.resetQuotaLocked(&c)
	}
	s.cfg.Store(&c)
	s.refreshLocked()
}

// SetCapacity replaces the schedule with a constant capacity c from now on
// (c < 0 is taken as 0). Queued requests are admitted at once if c grew;
// running requests are never preempted if it shrank.
func (s *Server) SetCapacity(c int) {
	s.SetSchedule([]Step{{Capacity: c}})
}

// SetSchedule replaces the capacity schedule; its steps are relative to now.
// An empty schedule means a constant DefaultCapacity.
func (s *Server) SetSchedule(steps []Step) {
	if len(steps) == 0 {
		steps = []Step{{Capacity: DefaultCapacity}}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setScheduleLocked(sortedSteps(steps))
}

// Capacity returns the capacity in force now.
func (s *Server) Capacity() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	return s.capacity
}

// Serve serves the simulated API on ln until Close or Shutdown, then returns
// nil. It returns ErrServerClosed at once if the server was already closed.
// Serve may be called for several listeners at once.
func (s *Server) Serve(ln net.Listener) error {
	s.life.Lock()
	if s.stopped {
		s.life.Unlock()
		return ErrServerClosed
	}
	s.lns = append(s.lns, ln)
	s.serving.Add(1)
	s.life.Unlock()
	defer s.serving.Done()
	return s.srv.Serve(ln)
}

// ListenAndServe listens on the TCP address addr and calls Serve.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// Shutdown stops accepting connections and waits for the requests in
// progress to finish. If ctx ends first, the remaining requests are aborted
// (counted as Aborted, their connections dropped) and Shutdown returns
// ctx.Err(). Either way it returns once every connection of Serve is closed
// and every request on them counted, and every Serve has returned.
//
// Requests served through Handler mounted in another server are aborted
// too, but end (and are counted) when that server writes them out.
func (s *Server) Shutdown(ctx context.Context) error {
	lns := s.stop()
	err := s.srv.ShutdownWithContext(ctx)
	closeAll(lns)
	if err != nil {
		s.abortAll()
		s.forceClose()
	}
	s.serving.Wait()
	s.waitConns()
	return err
}

// Close aborts every request in progress (counted as Aborted; streams are
// cut and non-stream requests dropped), closes all listeners and
// connections, and returns once every Serve has returned. The server cannot
// be restarted. Close is idempotent.
//
// Goroutines: after Close returns, fasthttp's worker-pool cleaner exits
// within MaxIdleWorkerDuration (100 ms); fasthttp's process-wide Date
// header refresher (updateServerDate) lives on, as it does for every
// fasthttp server.
func (s *Server) Close() error {
	lns := s.stop()
	s.abortAll()
	closeAll(lns)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := s.srv.ShutdownWithContext(ctx)
	cancel()
	if err != nil {
		s.forceClose()
	}
	s.serving.Wait()
	s.waitConns()
	return nil
}

// waitConns waits until every connection of Serve has closed, so that every
// request on them has been counted (fasthttp's Serve returns as soon as its
// listener closes, and ShutdownWithContext may give up early). Requests
// still in progress have been aborted, so this is short; it force-closes
// connections again every second in case one is stuck in a write.
func (s *Server) waitConns() {
	for i := 0; ; i++ {
		s.life.Lock()
		n := len(s.conns)
		s.life.Unlock()
		if n == 0 {
			return
		}
		if i > 0 && i%200 == 0 {
			s.forceClose()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop marks the server closed, stops the schedule timer and returns the
// listeners to close.
func (s *Server) stop() []net.Listener {
	s.mu.Lock()
	s.closed = true
	s.stopTimerLocked()
	s.mu.Unlock()
	s.life.Lock()
	defer s.life.Unlock()
	s.stopped = true
	lns := s.lns
	s.lns = nil
	return lns
}

func (s *Server) abortAll() {
	s.abortOnce.Do(func() { close(s.abort) })
}

func (s *Server) forceClose() {
	s.life.Lock()
	defer s.life.Unlock()
	for c := range s.conns {
		_ = c.Close()
	}
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		_ = ln.Close()
	}
}

func (s *Server) connState(c net.Conn, st fasthttp.ConnState) {
	s.life.Lock()
	defer s.life.Unlock()
	switch st {
	case fasthttp.StateNew:
		s.conns[c] = struct{}{}
	case fasthttp.StateClosed, fasthttp.StateHijacked:
		delete(s.conns, c)
	}
}
