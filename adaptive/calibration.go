package adaptive

import (
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// calibration measures, for one class, how far the wait estimated for a
// request when it joined the queue (estimateLocked) was from the wait it
// then had: the ratio actual / estimated. Every request that got its
// permit after waiting with an estimate counts in a histogram (for
// operators: CalibrationStats, the metric
// sluice_queue_wait_estimate_ratio). The requests that waited behind at
// least calibMinGrants grants, the waits an early refusal is about, also
// enter a window of the last calibWindow ratios, from which the queue
// decides whether the estimate has proven itself: a request is refused on
// its estimate only while that window is full enough, recent and its
// median within [calibLow, calibHigh] (calibrated), and then only when
// even its shortest plausible wait scaled by the window's low quantile
// exceeds the request's deadline (refusesEarly). Otherwise the request
// waits, and times out honestly if it must. While calibrated, what a
// request is told (its Retry-After) is the estimate scaled by the
// window's median (correct).
//
// A request that timed out is not counted: its wait is only known to be
// longer than its deadline. Leaving it out keeps the requests that were
// served faster than estimated, not those served slower: the window errs
// towards estimates that are too long, which refuses less.
//
// The window and its quantiles are under Limiter.mu (the slow path); the
// histogram's counters are atomics, read by Stats without the lock.
type calibration struct {
	ring  [calibWindow]calibSample
	n     int // samples in ring
	next  int // where the next one goes
	low   float64
	mid   float64
	last  time.Time // newest sample in the window
	quant [calibWindow]float64

	buckets [len(CalibrationBuckets) + 1]atomic.Uint64 // per bucket (not cumulative); last is +Inf
	count   atomic.Uint64
	sumBits atomic.Uint64 // float64 bits: sum of ratios
}

type calibSample struct {
	ratio float64
	at    time.Time
}

// CalibrationBuckets are the upper bounds of the histogram of actual over
// estimated wait (CalibrationStats.Buckets).
var CalibrationBuckets = [...]float64{0.125, 0.25, 0.5, 0.7, 0.85, 1, 1.2, 1.4, 2, 4, 8}

const (
	// calibWindow is the number of recent ratios the early-refusal
	// decision looks at.
	calibWindow = 64
	// calibMinSamples is how many of them it needs before it trusts the
	// estimate at all.
	calibMinSamples = 16
	// calibMinGrants: only requests estimated to wait behind this many
	// grants or more enter the window. A wait behind one or two grants is
	// the residual of a stream's length, noisy by nature; the waits that
	// early refusal is about are long ones, whose estimate sums many
	// grants.
	calibMinGrants = 4
	// calibLow and calibHigh bound the window's median: within them the
	// model's estimate is off by a factor the window corrects (what it
	// leaves out, such as requests of higher classes that arrive later
	// and go first, is steady enough to correct on average); outside
	// them something the model does not describe is going on, and it
	// refuses nothing.
	calibLow, calibHigh = 1.0 / 3, 3.0
	// calibSpread bounds the window's spread: its low quantile at least
	// this fraction of its median. A window that spreads wider (a limit
	// that swings, a provider whose streams vary by orders of magnitude)
	// says the estimate is right on average but not for a given request:
	// it refuses nothing.
	calibSpread = 0.5
	// calibLowQuantile is the quantile of the window by which an estimate
	// is scaled before it is compared with a deadline: a request is
	// refused only when it would miss its deadline even if its wait were
	// as short, relative to its estimate, as nearly the shortest seen.
	calibLowQuantile = 0.05
	// calibStale: a window whose newest sample is older than this (or
	// than calibStaleHolds permit hold times, if longer) describes a queue
	// that no longer exists.
	calibStale      = time.Minute
	calibStaleHolds = 4
)

// observe records, at now, a request that waited actual after the model
// estimated est behind grants grants and the request was told told
// (correct), while left waiters of its level or above left the queue
// without a permit.
//
// The histogram takes actual over told, what Sluice said. The window
// takes actual over est, the model's own error, against the estimate of
// the grants that were needed: waiters ahead that timed out or
// left did not need a grant, so the request was served sooner than its
// estimate said, and rightly so. Counted as an error of the estimate, that
// made it look too long whenever the queue held requests that would time
// out (a flood with short deadlines), and so refused nothing, which kept
// the queue full of requests that would time out.
func (c *calibration) observe(now time.Time, actual, est, told time.Duration, grants float64, left uint64) {
	if est <= 0 || told <= 0 {
		return
	}
	r := float64(actual) / float64(told)
	i, _ := slices.BinarySearch(CalibrationBuckets[:], r)
	c.buckets[i].Add(1)
	c.count.Add(1)
	c.sumBits.Store(math.Float64bits(math.Float64frombits(c.sumBits.Load()) + r))
	if grants < calibMinGrants {
		return
	}
	r = float64(actual) / float64(est)
	if f := float64(left); f > 0 {
		r *= grants / max(grants-f, 1)
	}
	c.ring[c.next] = calibSample{ratio: r, at: now}
	c.next = (c.next + 1) % calibWindow
	c.n = min(c.n+1, calibWindow)
	c.last = now
	q := c.quant[:c.n]
	for j := range q {
		q[j] = c.ring[j].ratio
	}
	slices.Sort(q)
	c.low = q[int(calibLowQuantile*float64(c.n))]
	c.mid = q[c.n/2]
}

// reset forgets the window (a reload changed what the estimate is
// about); the histogram keeps counting.
func (c *calibration) reset() {
	c.n, c.next, c.low, c.mid, c.last = 0, 0, 0, 0, time.Time{}
}

// calibrated reports whether the window vouches for the estimate at now;
// hold is the class's mean permit hold time in seconds.
func (c *calibration) calibrated(now time.Time, hold float64) bool {
	stale := max(calibStale, time.Duration(calibStaleHolds*hold*float64(time.Second)))
	return c.n >= calibMinSamples && now.Sub(c.last) <= stale && c.mid >= calibLow && c.mid <= calibHigh && c.low >= calibSpread*c.mid
}

// correct scales the model's estimate est by the median ratio of the
// window, when it is calibrated: what the model leaves out and the window
// sees (requests of other tenants or of higher classes arriving later and
// served first, a provider that holds permits longer than they were held
// before) is corrected for on average. It is what a request is told.
func (c *calibration) correct(now time.Time, est time.Duration, hold float64) time.Duration {
	if !c.calibrated(now, hold) {
		return est
	}
	return time.Duration(float64(est) * c.mid)
}

// refusesEarly reports whether a request whose shortest plausible wait
// the model puts at soon must be refused now because it cannot get a
// permit within maxWait: when even soon scaled by the window's low
// quantile exceeds maxWait. soon is a bound, not an estimate: a window
// whose waits came longer than estimated (a low quantile above 1, as
// while a limit is still doubling) does not scale it up. Only asked while
// the window is calibrated.
func (c *calibration) refusesEarly(soon, maxWait time.Duration) bool {
	return time.Duration(float64(soon)*min(c.low, 1)) > maxWait
}

// CalibrationStats is the histogram of actual over estimated wait of one
// class's requests that waited with an estimate, and the state of the
// window that decides early refusals.
type CalibrationStats struct {
	// Buckets[i] counts the ratios at most CalibrationBuckets[i] and above
	// the bound before it; the last entry counts those above every bound.
	Buckets []uint64
	Count   uint64
	Sum     float64
	// Window is the number of recent long waits the early-refusal decision
	// looks at; P50 and Low are their median and low quantile (0 while
	// Window is 0). Calibrated says whether requests are refused on their
	// estimate now.
	Window     int
	P50, Low   float64
	Calibrated bool
}

// stats reads the histogram (atomics) and, under Limiter.mu, the window.
func (c *calibration) stats(now time.Time, hold float64) CalibrationStats {
	s := CalibrationStats{Buckets: make([]uint64, len(c.buckets)), Count: c.count.Load(), Sum: math.Float64frombits(c.sumBits.Load())}
	for i := range c.buckets {
		s.Buckets[i] = c.buckets[i].Load()
	}
	s.Window, s.P50, s.Low, s.Calibrated = c.n, c.mid, c.low, c.calibrated(now, hold)
	return s
}
