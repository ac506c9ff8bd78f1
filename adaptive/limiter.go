package adaptive

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Rejection errors returned by Acquire. The proxy maps ErrQueueFull and
// ErrQueueTimeout to 429 with Retry-After; ErrCanceled means the client went
// away while waiting and nothing is sent.
var (
	ErrQueueFull    = errors.New("adaptive: wait queue full")
	ErrQueueTimeout = errors.New("adaptive: waited longer than max_wait")
	ErrCanceled     = errors.New("adaptive: canceled while waiting")
)

// Options configure a Limiter. Zero MaxWaiting means no queue: a request that
// finds no free permit is rejected at once.
type Options struct {
	Ceiling    int           // hard upper bound on permits in use; >= 1
	MaxWaiting int           // bound on the wait queue; 0 = no queue
	MaxWait    time.Duration // how long one request may wait; 0 = no waiting
	Controller Controller    // nil = fixed at Ceiling
	Clock      Clock         // nil = SystemClock
}

// Permit is proof that one request may be in flight. It is a value: the
// caller that owns the request must call Release exactly once (the proxy
// guards that with an atomic flag on its per-request state).
type Permit struct {
	// Granted is when the permit was handed out.
	Granted time.Time
	// Inflight is the number of permits in use right after this one was
	// granted, this one included.
	Inflight int
	// Waited is how long the request waited in the queue (0 on the fast path).
	Waited time.Duration
}

// Limiter admits requests for one provider: at most min(limit, ceiling)
// permits are in use at once, and further requests wait in a bounded FIFO
// queue until a permit is released, the limit rises, their wait budget ends,
// or they are canceled.
//
// Admission on the fast path is one CAS on an atomic counter. The queue's
// mutex is taken only when a request has to wait, or when a permit is
// released while somebody waits.
type Limiter struct {
	inflight atomic.Int64
	limit    atomic.Int64 // effective: min(controller limit, ceiling)
	ceiling  atomic.Int64
	waiting  atomic.Int64 // len(queue), readable without the lock

	ctrl  atomic.Pointer[ctrlBox]
	clock Clock

	mu         sync.Mutex
	head, tail *waiter
	maxWaiting int
	maxWait    time.Duration

	// counters for metrics; monotonic.
	admitted      atomic.Uint64
	rejectedFull  atomic.Uint64
	rejectedTime  atomic.Uint64
	canceled      atomic.Uint64
	waitedTotalNs atomic.Int64
	holdEWMA      atomic.Uint64 // float64 bits: smoothed permit hold time in seconds
}

type ctrlBox struct{ c Controller }

type waiter struct {
	ch      chan struct{} // buffered(1): receives the grant
	granted bool          // set under Limiter.mu
	next    *waiter
	prev    *waiter
	permit  Permit
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan struct{}, 1)} }}

// NewLimiter returns a Limiter. It panics on Ceiling < 1: the config package
// validates it first.
func NewLimiter(o Options) *Limiter {
	if o.Ceiling < 1 {
		panic("adaptive: ceiling must be >= 1")
	}
	l := &Limiter{}
	if o.Clock == nil {
		o.Clock = SystemClock{}
	}
	l.clock = o.Clock
	l.Reconfigure(o)
	return l
}

// Reconfigure applies new options to a live limiter. Permits in use and
// waiters are kept: a lower ceiling lets no new request in until enough
// streams end; a higher one (or a new controller with a higher limit) admits
// waiters at once. A nil Controller keeps the current one.
func (l *Limiter) Reconfigure(o Options) {
	if o.Ceiling < 1 {
		panic("adaptive: ceiling must be >= 1")
	}
	if o.Controller != nil {
		l.ctrl.Store(&ctrlBox{o.Controller})
	}
	l.mu.Lock()
	l.maxWaiting = o.MaxWaiting
	l.maxWait = o.MaxWait
	l.mu.Unlock()
	l.ceiling.Store(int64(o.Ceiling))
	l.setLimit(l.controllerLimit())
}

// Controller returns the limiter's controller, or nil for a plain semaphore.
func (l *Limiter) Controller() Controller {
	if b := l.ctrl.Load(); b != nil {
		return b.c
	}
	return nil
}

func (l *Limiter) controllerLimit() int64 {
	if b := l.ctrl.Load(); b != nil {
		return int64(b.c.Limit())
	}
	return math.MaxInt64
}

// setLimit stores min(want, ceiling) and, when room appeared, admits waiters.
func (l *Limiter) setLimit(want int64) {
	c := l.ceiling.Load()
	if want > c {
		want = c
	}
	if want < 1 {
		want = 1
	}
	old := l.limit.Swap(want)
	if want > old && l.waiting.Load() > 0 {
		l.drain()
	}
}

// TryAcquire grants a permit without waiting, or reports false. It never
// jumps the queue: while anybody waits, new requests must wait too. now is
// the caller's current time (the proxy reads the clock once per request and
// passes it down), recorded as the permit's grant time.
func (l *Limiter) TryAcquire(now time.Time) (Permit, bool) {
	if l.waiting.Load() > 0 {
		return Permit{}, false
	}
	n, ok := l.tryInc()
	if !ok {
		return Permit{}, false
	}
	l.admitted.Add(1)
	return Permit{Granted: now, Inflight: int(n)}, true
}

// tryInc takes a permit if in-flight is below the effective limit.
func (l *Limiter) tryInc() (int64, bool) {
	for {
		n := l.inflight.Load()
		if n >= l.limit.Load() {
			return 0, false
		}
		if l.inflight.CompareAndSwap(n, n+1) {
			return n + 1, true
		}
	}
}

// Acquire grants a permit, waiting in FIFO order when none is free. It
// returns ErrQueueFull at once when MaxWaiting requests already wait,
// ErrQueueTimeout after MaxWait, and ErrCanceled when cancel is closed first.
// cancel may be nil. now is the caller's current time.
//
// When the grant races with the timeout or cancel, the grant wins: Acquire
// returns the permit and no error, and a caller that has been canceled in the
// meantime must release it.
func (l *Limiter) Acquire(now time.Time, cancel <-chan struct{}) (Permit, error) {
	if p, ok := l.TryAcquire(now); ok {
		return p, nil
	}
	start := now
	l.mu.Lock()
	if l.waiting.Load() >= int64(l.maxWaiting) || l.maxWait <= 0 {
		l.mu.Unlock()
		l.rejectedFull.Add(1)
		return Permit{}, ErrQueueFull
	}
	w := waiterPool.Get().(*waiter)
	w.granted = false
	w.permit = Permit{}
	l.push(w)
	l.waiting.Add(1)
	maxWait := l.maxWait
	// A release may have happened between TryAcquire and push: it saw no
	// waiter and only decremented. Drain now so that room is not lost.
	l.drainLocked()
	l.mu.Unlock()

	timer := time.NewTimer(maxWait)
	var err error
	select {
	case <-w.ch:
	case <-timer.C:
		err = ErrQueueTimeout
	case <-cancel:
		err = ErrCanceled
	}
	timer.Stop()
	if err != nil {
		l.mu.Lock()
		if w.granted {
			// The grant raced with the timeout or cancel: the permit is
			// ours. Take it; the caller decides (a canceled caller
			// releases it at once).
			l.mu.Unlock()
			<-w.ch
			err = nil
		} else {
			l.remove(w)
			l.waiting.Add(-1)
			l.mu.Unlock()
			if err == ErrQueueTimeout {
				l.rejectedTime.Add(1)
			} else {
				l.canceled.Add(1)
			}
			waiterPool.Put(w)
			return Permit{}, err
		}
	}
	p := w.permit
	waiterPool.Put(w)
	p.Waited = p.Granted.Sub(start)
	if p.Waited < 0 {
		p.Waited = 0
	}
	l.waitedTotalNs.Add(int64(p.Waited))
	l.admitted.Add(1)
	return p, nil
}

// Release returns a permit at time now. The caller must call it exactly once
// per granted permit. If requests wait, the freed slot goes to the oldest of
// them.
func (l *Limiter) Release(p Permit, now time.Time) {
	if !p.Granted.IsZero() {
		l.observeHold(now.Sub(p.Granted))
	}
	if l.inflight.Add(-1) < 0 {
		panic("adaptive: permit released more often than granted")
	}
	if l.waiting.Load() > 0 {
		l.drain()
	}
}

func (l *Limiter) drain() {
	l.mu.Lock()
	l.drainLocked()
	l.mu.Unlock()
}

// drainLocked hands free permits to waiters in FIFO order.
func (l *Limiter) drainLocked() {
	for l.head != nil {
		n, ok := l.tryInc()
		if !ok {
			return
		}
		w := l.head
		l.remove(w)
		l.waiting.Add(-1)
		w.granted = true
		w.permit = Permit{Granted: l.clock.Now(), Inflight: int(n)}
		w.ch <- struct{}{}
	}
}

func (l *Limiter) push(w *waiter) {
	w.next, w.prev = nil, l.tail
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
}

func (l *Limiter) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.next, w.prev = nil, nil
}

// Observe feeds a sample about the request holding p to the controller and
// applies the controller's new limit. Dispatched and InflightAtDispatch are
// taken from p; Now defaults to the limiter's clock.
func (l *Limiter) Observe(p Permit, s Sample) {
	b := l.ctrl.Load()
	if b == nil {
		return
	}
	s.Dispatched = p.Granted
	s.InflightAtDispatch = p.Inflight
	if s.Now.IsZero() {
		s.Now = l.clock.Now()
	}
	l.setLimit(int64(b.c.Observe(s)))
}

// observeHold keeps a smoothed permit hold time, used to suggest Retry-After.
func (l *Limiter) observeHold(d time.Duration) {
	const alpha = 0.05
	x := d.Seconds()
	for {
		oldBits := l.holdEWMA.Load()
		old := math.Float64frombits(oldBits)
		v := x
		if old > 0 {
			v = old + alpha*(x-old)
		}
		if l.holdEWMA.CompareAndSwap(oldBits, math.Float64bits(v)) {
			return
		}
	}
}

// RetryAfter suggests how long a rejected client should wait before trying
// again: the time the current queue needs to drain at the current limit,
// from the smoothed permit hold time, rounded to whole seconds (the unit
// of the Retry-After header) and clamped to [1s, 60s].
func (l *Limiter) RetryAfter() time.Duration {
	hold := math.Float64frombits(l.holdEWMA.Load())
	lim := float64(l.limit.Load())
	est := hold * float64(l.waiting.Load()+1) / lim
	if !(est >= 1) { // also catches NaN
		return time.Second
	}
	if est > 60 {
		return time.Minute
	}
	return time.Duration(math.Round(est)) * time.Second
}

// Stats is a point-in-time view of a limiter, for metrics and status.
type Stats struct {
	Inflight        int
	Waiting         int
	Limit           int // effective: min(controller, ceiling)
	Ceiling         int
	Admitted        uint64
	RejectedFull    uint64
	RejectedTimeout uint64
	Canceled        uint64
	WaitedTotal     time.Duration
}

// Stats returns the current counters. Reads are atomic but not one snapshot.
func (l *Limiter) Stats() Stats {
	return Stats{
		Inflight:        int(l.inflight.Load()),
		Waiting:         int(l.waiting.Load()),
		Limit:           int(l.limit.Load()),
		Ceiling:         int(l.ceiling.Load()),
		Admitted:        l.admitted.Load(),
		RejectedFull:    l.rejectedFull.Load(),
		RejectedTimeout: l.rejectedTime.Load(),
		Canceled:        l.canceled.Load(),
		WaitedTotal:     time.Duration(l.waitedTotalNs.Load()),
	}
}
