package adaptive

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// BreakerState is the state of an upstream's circuit breaker.
type BreakerState uint32

const (
	// BreakerClosed: traffic flows; failures are counted.
	BreakerClosed BreakerState = iota
	// BreakerOpen: nothing is sent until the open time has passed.
	BreakerOpen
	// BreakerHalfOpen: a bounded number of probes are let through; enough
	// successes close the breaker, one failure opens it again.
	BreakerHalfOpen
)

// String returns the metric label value of s.
func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

// Breaker is one upstream's circuit breaker. It opens on
// ConsecutiveFailures failures in a row, or when FailureRatio of at least
// MinRequests attempts in the last Window failed, and at once on a quota
// or billing error (for QuotaOpenTime). Open, it lets nothing through for
// OpenTime; then it lets up to HalfOpenProbes probes through at once, and
// closes after that many succeed, or opens again on the first failure.
//
// What counts as a failure, a success or neither is the answer table's
// Breaker column (answer.go): a 5xx, a connect error, a reset before the
// response, a first-token timeout, a connection that broke mid-stream and
// a server-side error in a 2xx stream fail; client errors, rate limiting
// and cancellations are neither.
//
// Results carry the generation of the state their attempt started in: an
// attempt that began before the breaker last changed state does not count
// in the new state (a slow failure from before an opening does not extend
// it, a slow success from before does not close it).
//
// The hot path (Allow on a closed breaker, Record of a success) is atomic
// loads and adds; transitions take a mutex.
type Breaker struct {
	set atomic.Pointer[settings.Breaker]

	state  atomic.Uint32 // BreakerState
	gen    atomic.Uint64 // bumped at every transition
	until  atomic.Int64  // open: unix ns when probes may start
	consec atomic.Int64  // failures in a row (closed)
	// half is the half-open state in one word, so that a probe of an
	// earlier half-open period can never count in a later one: the low 32
	// bits of the generation, successful probes (16 bits), probes in
	// flight (16 bits).
	half atomic.Uint64
	win  slotRing // closed: a = attempts, b = failures

	mu sync.Mutex // transitions

	opened      atomic.Uint64 // times opened
	quotaOpened atomic.Uint64 // of which on a quota error
}

// newBreaker returns a closed breaker.
func newBreaker(s settings.Breaker) *Breaker {
	b := &Breaker{}
	b.reconfigure(s)
	return b
}

// reconfigure applies new settings; the state is kept.
func (b *Breaker) reconfigure(s settings.Breaker) {
	b.set.Store(&s)
	b.win.setWindow(s.Window)
}

// Ticket is an attempt's pass through a breaker: which generation it
// started in and whether it is a half-open probe.
type Ticket struct {
	gen   uint64
	probe bool
}

// Probe reports whether the ticket is a half-open probe.
func (t Ticket) Probe() bool { return t.probe }

// Allow asks whether an attempt may go to the upstream at now. Closed:
// yes. Open: no, until the open time has passed; then the breaker turns
// half-open. Half-open: yes while fewer than HalfOpenProbes probes are in
// flight. The ticket must be handed back to Record.
func (b *Breaker) Allow(now time.Time) (Ticket, bool) {
	for {
		gen := b.gen.Load()
		switch BreakerState(b.state.Load()) {
		case BreakerClosed:
			return Ticket{gen: gen}, true
		case BreakerOpen:
			if now.UnixNano() < b.until.Load() {
				return Ticket{}, false
			}
			b.halfOpen(now, gen)
		case BreakerHalfOpen:
			w := b.half.Load()
			if halfGen(w) != uint32(gen) {
				continue // a transition is under way
			}
			if halfInflight(w) >= b.set.Load().HalfOpenProbes {
				return Ticket{}, false
			}
			if b.half.CompareAndSwap(w, w+1) {
				return Ticket{gen: gen, probe: true}, true
			}
		}
	}
}

// Available reports, without taking a probe, whether Allow would say yes
// at now.
func (b *Breaker) Available(now time.Time) bool {
	switch BreakerState(b.state.Load()) {
	case BreakerOpen:
		return now.UnixNano() >= b.until.Load()
	case BreakerHalfOpen:
		return halfInflight(b.half.Load()) < b.set.Load().HalfOpenProbes
	}
	return true
}

func halfGen(w uint64) uint32   { return uint32(w >> 32) }
func halfPassed(w uint64) int   { return int(w >> 16 & 0xffff) }
func halfInflight(w uint64) int { return int(w & 0xffff) }

// OpenFor reports how long until an open breaker lets probes through (0
// when it is not open or the time has passed).
func (b *Breaker) OpenFor(now time.Time) time.Duration {
	if BreakerState(b.state.Load()) != BreakerOpen {
		return 0
	}
	return max(time.Duration(b.until.Load()-now.UnixNano()), 0)
}

// State returns the state at now (an open breaker whose time has passed
// reports half-open).
func (b *Breaker) State(now time.Time) BreakerState {
	s := BreakerState(b.state.Load())
	if s == BreakerOpen && now.UnixNano() >= b.until.Load() {
		return BreakerHalfOpen
	}
	return s
}

// Record feeds the result of an attempt that Allow let through with t.
func (b *Breaker) Record(now time.Time, t Ticket, r AttemptResult) {
	b.record(now, t, MeaningOf(r).Breaker)
}

func (b *Breaker) record(now time.Time, t Ticket, v breakerVerdict) {
	if t.probe {
		b.recordProbe(now, t, v)
		return
	}
	if t.gen != b.gen.Load() {
		return // started in an earlier state
	}
	switch v {
	case verdictSuccess:
		if b.consec.Load() != 0 { // a load, not a store: no write to a shared line per success
			b.consec.Store(0)
		}
		if b.set.Load().FailureRatio > 0 {
			b.win.add(now, 1, 0)
		}
	case verdictFailure:
		n := b.consec.Add(1)
		b.win.add(now, 1, 1)
		s := b.set.Load()
		if s.ConsecutiveFailures > 0 && n >= int64(s.ConsecutiveFailures) {
			b.open(now, t.gen, s.OpenTime, false)
			return
		}
		if s.FailureRatio > 0 {
			total, failed := b.win.sum(now)
			if total >= int64(s.MinRequests) && float64(failed) >= s.FailureRatio*float64(total) {
				b.open(now, t.gen, s.OpenTime, false)
			}
		}
	case verdictQuota:
		b.open(now, t.gen, b.set.Load().QuotaOpenTime, true)
	}
}

func (b *Breaker) recordProbe(now time.Time, t Ticket, v breakerVerdict) {
	var w uint64
	for {
		w = b.half.Load()
		if halfGen(w) != uint32(t.gen) {
			return // the breaker moved on; its probe count was reset
		}
		next := w - 1 // one probe fewer in flight
		if v == verdictSuccess {
			next += 1 << 16
		}
		if b.half.CompareAndSwap(w, next) {
			w = next
			break
		}
	}
	switch v {
	case verdictSuccess:
		if halfPassed(w) >= b.set.Load().HalfOpenProbes {
			b.close(t.gen)
		}
	case verdictFailure:
		b.open(now, t.gen, b.set.Load().OpenTime, false)
	case verdictQuota:
		b.open(now, t.gen, b.set.Load().QuotaOpenTime, true)
	}
}

// open moves the breaker from generation gen to open until now+d. It does
// nothing if the breaker has moved on from gen.
func (b *Breaker) open(now time.Time, gen uint64, d time.Duration, quota bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen.Load() != gen {
		return
	}
	b.until.Store(now.Add(d).UnixNano())
	b.state.Store(uint32(BreakerOpen))
	b.gen.Add(1)
	b.opened.Add(1)
	if quota {
		b.quotaOpened.Add(1)
	}
}

func (b *Breaker) halfOpen(now time.Time, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen.Load() != gen || BreakerState(b.state.Load()) != BreakerOpen || now.UnixNano() < b.until.Load() {
		return
	}
	next := b.gen.Load() + 1
	b.half.Store(uint64(uint32(next)) << 32)
	b.state.Store(uint32(BreakerHalfOpen))
	b.gen.Store(next)
}

func (b *Breaker) close(gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen.Load() != gen {
		return
	}
	b.consec.Store(0)
	b.win.reset()
	b.state.Store(uint32(BreakerClosed))
	b.gen.Add(1)
}

// BreakerStats is a breaker's state for metrics and the status page.
type BreakerStats struct {
	State BreakerState
	// OpenFor is how long until an open breaker lets probes through.
	OpenFor             time.Duration
	ConsecutiveFailures int
	// Opened counts openings; QuotaOpened those caused by a quota or
	// billing error.
	Opened, QuotaOpened uint64
}

// Stats returns the breaker's state at now.
func (b *Breaker) Stats(now time.Time) BreakerStats {
	return BreakerStats{
		State:               b.State(now),
		OpenFor:             b.OpenFor(now),
		ConsecutiveFailures: int(b.consec.Load()),
		Opened:              b.opened.Load(),
		QuotaOpened:         b.quotaOpened.Load(),
	}
}
