// Package bucket is the token bucket that Sluice's rate limits (adaptive's
// quotas) and the controller's dispatch pace (adaptive/control) share: a
// GCRA on one atomic word, so taking, refunding and charging tokens are
// each one CAS, with no lock and no allocation. It imports nothing of
// Sluice's.
package bucket

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"
)

// Bucket is a token bucket of capacity tokens that refills at capacity
// per window, kept as a GCRA (generic cell rate algorithm): one atomic
// "theoretical arrival time" (tat), the time at which the bucket would be
// full again. Taking n tokens moves tat n intervals later; time passing
// refills it. So a reservation, a refund and a charge are each one CAS on
// one word, with no lock and no allocation, and tokens are exact: every
// amount is a whole number of intervals, so taking and giving back the same
// amount leaves the bucket where it was.
//
// The level is capacity - ceil((tat - now) / interval) when tat is after
// now, else capacity (a bucket never holds more than it can). It goes
// negative when a request used more than it reserved: the debt is paid
// by time, and nothing fits until it is.
//
// Time is kept in ticks of 1/16 ns since an epoch (see Clock), so that the
// interval (window / capacity) is rounded up by at most 1/16 ns: well under
// 0.1% for a per-minute limit of up to 10^9. Up to about 18 years after the
// epoch are representable; the arithmetic saturates instead of
// overflowing.
//
// A bucket's capacity and window change rarely (a reload, or a provider
// reporting a new limit). They live with the tat in an immutable-shape
// gcra; resize seals the current one (its tat becomes sealedTAT, so any
// CAS on it fails), carries the level over to a new one and publishes it.
// Operations that meet a sealed gcra reload the pointer.
//
// The zero Bucket is off: it limits nothing until Start, Resize or Retime
// turns it on. Every method is safe for concurrent use.
type Bucket struct {
	cur atomic.Pointer[gcra] // nil: the bucket is off (no limit on this dimension)
}

type gcra struct {
	capacity int64 // tokens
	interval int64 // ticks per token, >= 1
	window   time.Duration
	tat      atomic.Int64 // ticks since the epoch; sealedTAT once replaced
}

const (
	// TicksPerNs is the resolution of bucket time: ticks per nanosecond.
	TicksPerNs = 16
	// MaxTicks bounds every tick value: the arithmetic saturates there.
	MaxTicks  = math.MaxInt64 / 4
	sealedTAT = math.MinInt64
)

// Clock converts times to bucket ticks since its epoch.
type Clock struct{ Epoch time.Time }

// Ticks converts now to ticks since the epoch, saturating.
func (e Clock) Ticks(now time.Time) int64 {
	d := int64(now.Sub(e.Epoch))
	if d > MaxTicks/TicksPerNs {
		return MaxTicks
	}
	if d < -MaxTicks/TicksPerNs {
		return -MaxTicks
	}
	return d * TicksPerNs
}

// DurationOf converts ticks to a duration, rounding up so that a wait is
// never short.
func DurationOf(t int64) time.Duration {
	if t <= 0 {
		return 0
	}
	return time.Duration((t + TicksPerNs - 1) / TicksPerNs)
}

// TicksOf converts a duration to ticks (0 for d <= 0), saturating.
func TicksOf(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if int64(d) > MaxTicks/TicksPerNs {
		return MaxTicks
	}
	return int64(d) * TicksPerNs
}

// MulSat returns a*b for a, b >= 0, saturating at MaxTicks.
func MulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > MaxTicks/b {
		return MaxTicks
	}
	return a * b
}

// AddSat returns a+b clamped to [-MaxTicks, MaxTicks]; a and b are each in
// that range.
func AddSat(a, b int64) int64 {
	return min(max(a+b, -MaxTicks), MaxTicks)
}

func newGCRA(capacity int64, window time.Duration) *gcra {
	iv := (TicksOf(window) + capacity - 1) / capacity
	return &gcra{capacity: capacity, interval: max(iv, 1), window: window}
}

// Start turns the bucket on, full at now, with capacity tokens per window.
// capacity must be >= 1 and window > 0.
func (b *Bucket) Start(now int64, capacity int64, window time.Duration) {
	g := newGCRA(capacity, window)
	g.tat.Store(now)
	b.cur.Store(g)
}

// load returns the current gcra and its tat, waiting out a resize.
func (b *Bucket) load() (*gcra, int64) {
	for {
		g := b.cur.Load()
		if g == nil {
			return nil, 0
		}
		t := g.tat.Load()
		if t != sealedTAT {
			return g, t
		}
		runtime.Gosched() // a resize is between seal and publish
	}
}

// Reserve takes cost tokens at now if they fit within maxWait. It returns
// how long the caller must wait before using them (0: at once) and
// whether they were taken; when not taken, wait is how long until they
// would fit now. A cost above the capacity never fits (tooLarge). on is
// false for an off bucket (which takes nothing and always succeeds).
func (b *Bucket) Reserve(now int64, cost, maxWait int64) (wait int64, ok, tooLarge, on bool) {
	for {
		g, tat := b.load()
		if g == nil {
			return 0, true, false, false
		}
		if cost > g.capacity {
			return 0, false, true, true
		}
		next := AddSat(max(tat, now), MulSat(cost, g.interval))
		// The tokens are there once the bucket's debt after taking them
		// is at most its capacity.
		wait = max(next-MulSat(g.capacity, g.interval)-now, 0)
		if wait > maxWait {
			return wait, false, false, true
		}
		if g.tat.CompareAndSwap(tat, next) {
			return wait, true, false, true
		}
	}
}

// WaitFor reports how long until cost tokens would fit, without taking
// them (0 for an off bucket; -1 when they never fit).
func (b *Bucket) WaitFor(now int64, cost int64) int64 {
	g, tat := b.load()
	if g == nil {
		return 0
	}
	if cost > g.capacity {
		return -1
	}
	next := AddSat(max(tat, now), MulSat(cost, g.interval))
	return max(next-MulSat(g.capacity, g.interval)-now, 0)
}

// Adjust gives back (delta < 0) or takes (delta > 0) tokens at now. A
// refund never fills the bucket above its capacity.
func (b *Bucket) Adjust(now int64, delta int64) {
	if delta == 0 {
		return
	}
	for {
		g, tat := b.load()
		if g == nil {
			return
		}
		var next int64
		if delta > 0 {
			next = AddSat(max(tat, now), MulSat(delta, g.interval))
		} else {
			if tat <= now {
				return // already full
			}
			next = max(AddSat(tat, -MulSat(-delta, g.interval)), now)
		}
		if g.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// Level returns the tokens in the bucket at now (negative: debt), and its
// capacity; ok is false for an off bucket.
func (b *Bucket) Level(now int64) (level, capacity int64, ok bool) {
	g, tat := b.load()
	if g == nil {
		return 0, 0, false
	}
	if tat <= now {
		return g.capacity, g.capacity, true
	}
	debt := (tat - now + g.interval - 1) / g.interval
	return g.capacity - debt, g.capacity, true
}

// SetLevel makes the bucket hold level tokens at now (clamped to the
// capacity; negative is debt). fix, when not nil, is called inside the CAS
// loop to correct the level with values that must be read after the
// bucket's state (a quota that follows a provider's own count).
func (b *Bucket) SetLevel(now int64, level int64, fix func(int64) int64) {
	for {
		g, tat := b.load()
		if g == nil {
			return
		}
		l := level
		if fix != nil {
			l = fix(l)
		}
		l = min(l, g.capacity)
		debt := g.capacity - l // >= 0
		next := AddSat(now, MulSat(debt, g.interval))
		if g.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// HoldUntil makes a single token fit no sooner than until (a provider's
// Retry-After): the bucket owes what refills until then, and more if it
// already did. An off bucket stays off.
func (b *Bucket) HoldUntil(until int64) {
	for {
		g, tat := b.load()
		if g == nil {
			return
		}
		next := AddSat(until, MulSat(g.capacity-1, g.interval))
		if next <= tat || g.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// Resize gives the bucket a new capacity and window at now. The tokens in
// use (capacity - level) carry over as they are: a full bucket stays full,
// and one with n tokens in use still has n in use under the new capacity
// (so a bucket that shrank below its use owes the difference). An off
// bucket is turned on, full.
func (b *Bucket) Resize(nt int64, capacity int64, window time.Duration) {
	b.replace(nt, capacity, window, true)
}

// Retime is Resize keeping the time at which the bucket is full again
// rather than the tokens in use: slots handed out at the old spacing stay
// where they were given (a dispatch pace). An off bucket is turned on, full.
func (b *Bucket) Retime(nt int64, capacity int64, window time.Duration) {
	b.replace(nt, capacity, window, false)
}

// replace seals the current gcra and publishes one of capacity and
// window, its tat carried over as tokens in use (carry) or as a time.
func (b *Bucket) replace(nt int64, capacity int64, window time.Duration, carry bool) {
	for {
		g := b.cur.Load()
		if g == nil {
			ng := newGCRA(capacity, window)
			ng.tat.Store(nt)
			if b.cur.CompareAndSwap(nil, ng) {
				return
			}
			continue
		}
		tat := g.tat.Load()
		if tat == sealedTAT {
			runtime.Gosched()
			continue
		}
		if g.capacity == capacity && g.window == window {
			return
		}
		if !g.tat.CompareAndSwap(tat, sealedTAT) {
			continue
		}
		ng := newGCRA(capacity, window)
		next := tat
		if carry {
			used := float64(max(tat-nt, 0)) / float64(g.interval)
			debt := int64(math.Ceil(used * float64(ng.interval)))
			if used*float64(ng.interval) >= float64(MaxTicks) {
				debt = MaxTicks
			}
			next = AddSat(nt, debt)
		}
		ng.tat.Store(next)
		b.cur.Store(ng)
		return
	}
}

// Stop turns the bucket off.
func (b *Bucket) Stop() { b.cur.Store(nil) }

// Params returns the bucket's capacity and window (0, 0 when off).
func (b *Bucket) Params() (int64, time.Duration) {
	g := b.cur.Load()
	if g == nil {
		return 0, 0
	}
	return g.capacity, g.window
}

// On reports whether the bucket is on: one atomic load.
func (b *Bucket) On() bool { return b.cur.Load() != nil }

// Shape returns the bucket's capacity, its refill interval in ticks per
// token and its window; on is false for an off bucket (all zero).
func (b *Bucket) Shape() (capacity, interval int64, window time.Duration, on bool) {
	g := b.cur.Load()
	if g == nil {
		return 0, 0, 0, false
	}
	return g.capacity, g.interval, g.window, true
}

// State returns the bucket's theoretical arrival time (the tick at which
// it is full again) with its shape, read together (waiting out a
// resize); on is false for an off bucket.
func (b *Bucket) State() (tat, capacity, interval int64, window time.Duration, on bool) {
	g, tat := b.load()
	if g == nil {
		return 0, 0, 0, 0, false
	}
	return tat, g.capacity, g.interval, g.window, true
}
