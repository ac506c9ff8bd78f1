package adaptive

// The virtual time of adaptive's tests: the clocks, the event queue and the
// token-count distribution the limiter and world simulations share. The
// controller's own simulator (adaptive/control) has the same primitives.

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// ctrlClock is a virtual clock for controller tests. Now adds step on every
// call (0 = only Advance moves it), so benchmarks can let time pass per
// sample. Safe for concurrent use.
type ctrlClock struct {
	base time.Time
	ns   atomic.Int64
	step int64
}

func newCtrlClock() *ctrlClock { return &ctrlClock{base: time.Unix(1_700_000_000, 0)} }

func (c *ctrlClock) Now() time.Time               { return c.base.Add(time.Duration(c.ns.Add(c.step))) }
func (c *ctrlClock) Advance(d time.Duration)      { c.ns.Add(int64(d)) }
func (c *ctrlClock) At(d time.Duration) time.Time { return c.base.Add(d) }
func (c *ctrlClock) Elapsed() time.Duration       { return time.Duration(c.ns.Load()) }

// simClock is the controllers' Clock: the event loop's current time.
type simClock struct {
	base time.Time
	now  time.Duration
}

func (c *simClock) Now() time.Time { return c.base.Add(c.now) }

type simEvent struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type simEventHeap []simEvent

func (h simEventHeap) Len() int { return len(h) }
func (h simEventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h simEventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *simEventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *simEventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// simDist is a token-count distribution: lognormal with the given mean and
// sigma, rounded and clamped to [1, max] (bench/load.Dist).
type simDist struct {
	mean, sigma float64
	max         int
}

func (d simDist) draw(r *rand.Rand) int {
	mu := math.Log(d.mean) - d.sigma*d.sigma/2
	n := max(1, int(math.Round(math.Exp(mu+d.sigma*r.NormFloat64()))))
	if d.max > 0 {
		n = min(n, d.max)
	}
	return n
}

// simStep is a value (capacity, limit) from at on.
type simStep struct {
	at time.Duration
	c  int
}
