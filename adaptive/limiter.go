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
	set   atomic.Pointer[LimiterSettings] // in force; for Stats
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
	drops         [NumDropKinds]atomic.Uint64 // drops fed to the controller, by kind
	holdEWMA      atomic.Uint64               // float64 bits: smoothed permit hold time in seconds
	fleet         fleetHooks                  // external cap and lease source (fleet.go, lease.go)
}

type ctrlBox struct{ c Controller }

type waiter struct {
	ch       chan struct{} // buffered(1): receives the grant
	granted  bool          // set under Limiter.mu
	next     *waiter
	prev     *waiter
	at       time.Time // grant time
	inflight int       // in flight right after the grant
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ch: make(chan struct{}, 1)} }}

// newLimiter returns a Limiter for set, admitting through ctrl. Limiters
// are built, kept across reloads and retired by a Registry.
func newLimiter(set LimiterSettings, ctrl Controller, clk Clock) *Limiter {
	if clk == nil {
		clk = SystemClock{}
	}
	l := &Limiter{clock: clk}
	l.reconfigure(set, ctrl)
	return l
}

// reconfigure applies new settings to a live limiter. Permits in use and
// waiters are kept: a lower ceiling lets no new request in until enough
// streams end; a higher one (or a new controller with a higher limit)
// admits waiters at once. A nil ctrl keeps the current one.
func (l *Limiter) reconfigure(set LimiterSettings, ctrl Controller) {
	if set.Limit.Ceiling < 1 {
		panic("adaptive: ceiling must be >= 1")
	}
	if ctrl != nil {
		l.ctrl.Store(&ctrlBox{ctrl})
	}
	l.set.Store(&set)
	l.mu.Lock()
	l.maxWaiting = set.Queue.MaxWaiting
	l.maxWait = set.Queue.MaxWait
	l.mu.Unlock()
	l.ceiling.Store(int64(set.Limit.Ceiling))
	l.setLimit(l.controllerLimit())
}

func (l *Limiter) controllerLimit() int64 {
	if b := l.ctrl.Load(); b != nil {
		return int64(b.c.Limit())
	}
	return math.MaxInt64
}

// setLimit stores min(want, ceiling, fleet cap) and, when room appeared, admits waiters.
func (l *Limiter) setLimit(want int64) {
	c := l.fleet.bound(l.ceiling.Load())
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

// TryAcquire grants p without waiting, or reports false. It never jumps
// the queue: while anybody waits, new requests must wait too. now is the
// caller's current time (the proxy reads the clock once per request and
// passes it down), recorded as the permit's grant time. p must not be held.
func (l *Limiter) TryAcquire(now time.Time, p *Permit) bool {
	if l.waiting.Load() > 0 {
		return false
	}
	n, ok := l.tryInc()
	if !ok {
		return false
	}
	l.admitted.Add(1)
	p.grant(l, now, int(n), 0)
	return true
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

// Acquire grants p, waiting in FIFO order when no permit is free. It
// returns ErrQueueFull at once when MaxWaiting requests already wait,
// ErrQueueTimeout after MaxWait, and ErrCanceled when cancel is closed
// first. cancel may be nil. now is the caller's current time.
//
// When the grant races with the timeout or cancel, the grant wins: Acquire
// grants p and returns no error, and a caller that has been canceled in the
// meantime must Finish it.
func (l *Limiter) Acquire(now time.Time, cancel <-chan struct{}, p *Permit) error {
	return l.AcquireWithin(now, cancel, -1, p)
}

// AcquireWithin is Acquire with the wait bounded by budget as well as by
// MaxWait: what is left of queue.max_wait after a request waited for its
// rate reservation (negative: MaxWait alone). With no budget left, a
// request that finds no permit free gets ErrQueueTimeout at once (unless
// the queue is full: ErrQueueFull).
func (l *Limiter) AcquireWithin(now time.Time, cancel <-chan struct{}, budget time.Duration, p *Permit) error {
	if l.TryAcquire(now, p) {
		return nil
	}
	l.mu.Lock()
	if l.waiting.Load() >= int64(l.maxWaiting) || l.maxWait <= 0 {
		l.mu.Unlock()
		l.rejectedFull.Add(1)
		return ErrQueueFull
	}
	maxWait := l.maxWait
	if budget >= 0 && budget < maxWait {
		maxWait = budget
	}
	if maxWait <= 0 {
		l.mu.Unlock()
		l.rejectedTime.Add(1)
		return ErrQueueTimeout
	}
	w := waiterPool.Get().(*waiter)
	w.granted = false
	l.push(w)
	l.waiting.Add(1)
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
		if !w.granted {
			l.remove(w)
			l.waiting.Add(-1)
			l.mu.Unlock()
			if err == ErrQueueTimeout {
				l.rejectedTime.Add(1)
			} else {
				l.canceled.Add(1)
			}
			waiterPool.Put(w)
			return err
		}
		// The grant raced with the timeout or cancel: the permit is ours.
		// Take it; the caller decides (a canceled caller finishes it).
		l.mu.Unlock()
		<-w.ch
	}
	at, inflight := w.at, w.inflight
	waiterPool.Put(w)
	waited := max(at.Sub(now), 0)
	l.waitedTotalNs.Add(int64(waited))
	l.admitted.Add(1)
	p.grant(l, at, inflight, waited)
	return nil
}

// release returns p's slot at now (Permit.Finish calls it, once). If
// requests wait, the freed slot goes to the oldest of them.
func (l *Limiter) release(p *Permit, now time.Time) {
	if !p.granted.IsZero() {
		l.observeHold(now.Sub(p.granted))
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
		w.at, w.inflight = l.clock.Now(), int(n)
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

// observe feeds a sample about the request holding p to the controller
// and applies the controller's new limit. Dispatched and
// InflightAtDispatch are taken from p; Now defaults to the limiter's clock.
func (l *Limiter) observe(p *Permit, s Sample) {
	if s.Kind == Dropped && s.Drop < NumDropKinds {
		l.drops[s.Drop].Add(1)
	}
	b := l.ctrl.Load()
	if b == nil {
		return
	}
	s.Dispatched = p.granted
	s.InflightAtDispatch = p.inflight
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
