package adaptive

import (
	"math"
	"runtime"
	"sync/atomic"
	"time"
)

// bucket is a token bucket of capacity tokens that refills at capacity
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
// Time is kept in ticks of 1/16 ns since an epoch (see epochClock), so that the
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
type bucket struct {
	cur atomic.Pointer[gcra] // nil: the bucket is off (no limit on this dimension)
}

type gcra struct {
	capacity int64 // tokens
	interval int64 // ticks per token, >= 1
	window   time.Duration
	tat      atomic.Int64 // ticks since the epoch; sealedTAT once replaced
}

const (
	ticksPerNs = 16
	sealedTAT  = math.MinInt64
	maxTicks   = math.MaxInt64 / 4 // saturation bound of every tick value
)

// epochClock converts times to bucket ticks since its epoch.
type epochClock struct{ epoch time.Time }

// ticks converts now to ticks since the epoch, saturating.
func (e epochClock) ticks(now time.Time) int64 {
	d := int64(now.Sub(e.epoch))
	if d > maxTicks/ticksPerNs {
		return maxTicks
	}
	if d < -maxTicks/ticksPerNs {
		return -maxTicks
	}
	return d * ticksPerNs
}

// durationOf converts ticks to a duration, rounding up so that a wait is
// never short.
func durationOf(t int64) time.Duration {
	if t <= 0 {
		return 0
	}
	return time.Duration((t + ticksPerNs - 1) / ticksPerNs)
}

func ticksOf(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if int64(d) > maxTicks/ticksPerNs {
		return maxTicks
	}
	return int64(d) * ticksPerNs
}

// mulSat returns a*b for a, b >= 0, saturating at maxTicks.
func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > maxTicks/b {
		return maxTicks
	}
	return a * b
}

// addSat returns a+b clamped to [-maxTicks, maxTicks]; a and b are each in
// that range.
func addSat(a, b int64) int64 {
	return min(max(a+b, -maxTicks), maxTicks)
}

func newGCRA(capacity int64, window time.Duration) *gcra {
	iv := (ticksOf(window) + capacity - 1) / capacity
	return &gcra{capacity: capacity, interval: max(iv, 1), window: window}
}

// start turns the bucket on, full at now, with capacity tokens per window.
// capacity must be >= 1 and window > 0.
func (b *bucket) start(now int64, capacity int64, window time.Duration) {
	g := newGCRA(capacity, window)
	g.tat.Store(now)
	b.cur.Store(g)
}

// load returns the current gcra and its tat, waiting out a resize.
func (b *bucket) load() (*gcra, int64) {
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

// reserve takes cost tokens at now if they fit within maxWait. It returns
// how long the caller must wait before using them (0: at once) and
// whether they were taken; when not taken, wait is how long until they
// would fit now. A cost above the capacity never fits (tooLarge). on is
// false for an off bucket (which takes nothing and always succeeds).
func (b *bucket) reserve(now int64, cost, maxWait int64) (wait int64, ok, tooLarge, on bool) {
	for {
		g, tat := b.load()
		if g == nil {
			return 0, true, false, false
		}
		if cost > g.capacity {
			return 0, false, true, true
		}
		next := addSat(max(tat, now), mulSat(cost, g.interval))
		// The tokens are there once the bucket's debt after taking them
		// is at most its capacity.
		wait = max(next-mulSat(g.capacity, g.interval)-now, 0)
		if wait > maxWait {
			return wait, false, false, true
		}
		if g.tat.CompareAndSwap(tat, next) {
			return wait, true, false, true
		}
	}
}

// waitFor reports how long until cost tokens would fit, without taking
// them (0 for an off bucket; -1 when they never fit).
func (b *bucket) waitFor(now int64, cost int64) int64 {
	g, tat := b.load()
	if g == nil {
		return 0
	}
	if cost > g.capacity {
		return -1
	}
	next := addSat(max(tat, now), mulSat(cost, g.interval))
	return max(next-mulSat(g.capacity, g.interval)-now, 0)
}

// adjust gives back (delta < 0) or takes (delta > 0) tokens at now. A
// refund never fills the bucket above its capacity.
func (b *bucket) adjust(now int64, delta int64) {
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
			next = addSat(max(tat, now), mulSat(delta, g.interval))
		} else {
			if tat <= now {
				return // already full
			}
			next = max(addSat(tat, -mulSat(-delta, g.interval)), now)
		}
		if g.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// level returns the tokens in the bucket at now (negative: debt), and its
// capacity; ok is false for an off bucket.
func (b *bucket) level(now int64) (level, capacity int64, ok bool) {
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

// setLevel makes the bucket hold level tokens at now (clamped to the
// capacity; negative is debt). fix, when not nil, is called inside the CAS
// loop to correct the level with values that must be read after the
// bucket's state (see Quota.learn).
func (b *bucket) setLevel(now int64, level int64, fix func(int64) int64) {
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
		next := addSat(now, mulSat(debt, g.interval))
		if g.tat.CompareAndSwap(tat, next) {
			return
		}
	}
}

// resize gives the bucket a new capacity and window at now. The tokens in
// use (capacity - level) carry over as they are: a full bucket stays full,
// and one with n tokens in use still has n in use under the new capacity
// (so a bucket that shrank below its use owes the difference). An off
// bucket is turned on, full.
func (b *bucket) resize(nt int64, capacity int64, window time.Duration) {
	b.replace(nt, capacity, window, true)
}

// retime is resize keeping the time at which the bucket is full again
// rather than the tokens in use: slots handed out at the old spacing stay
// where they were given (dispatchPace). An off bucket is turned on, full.
func (b *bucket) retime(nt int64, capacity int64, window time.Duration) {
	b.replace(nt, capacity, window, false)
}

// replace seals the current gcra and publishes one of capacity and
// window, its tat carried over as tokens in use (carry) or as a time.
func (b *bucket) replace(nt int64, capacity int64, window time.Duration, carry bool) {
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
			if used*float64(ng.interval) >= float64(maxTicks) {
				debt = maxTicks
			}
			next = addSat(nt, debt)
		}
		ng.tat.Store(next)
		b.cur.Store(ng)
		return
	}
}

// stop turns the bucket off.
func (b *bucket) stop() { b.cur.Store(nil) }

// params returns the bucket's capacity and window (0, 0 when off).
func (b *bucket) params() (int64, time.Duration) {
	g := b.cur.Load()
	if g == nil {
		return 0, 0
	}
	return g.capacity, g.window
}
