// Package vtime is the virtual time the tests of adaptive and
// adaptive/control share: a free-running clock for controller tests, an
// event loop for the discrete-event simulations, and the lognormal token
// counts and step schedules those simulations draw their worlds from.
// Nothing sleeps and nothing reads the wall clock, so a simulation is as
// deterministic as its seed. It imports nothing of Sluice's, and only
// _test.go files import it; the import-rule test in cmd/sluice checks both.
package vtime

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Epoch is the instant virtual time starts at: a fixed date, so that
// anything printed from a run is the same in every run.
var Epoch = time.Unix(1_700_000_000, 0)

// Clock is a virtual clock for controller tests: time moves when the test
// calls Advance, and by Tick on every call to Now (0 = only Advance moves
// it), so that a benchmark can let time pass per sample. Safe for
// concurrent use; set Tick before sharing the clock.
type Clock struct {
	Tick time.Duration
	ns   atomic.Int64
}

// NewClock returns a clock at Epoch.
func NewClock() *Clock { return &Clock{} }

func (c *Clock) Now() time.Time               { return Epoch.Add(time.Duration(c.ns.Add(int64(c.Tick)))) }
func (c *Clock) Advance(d time.Duration)      { c.ns.Add(int64(d)) }
func (c *Clock) At(d time.Duration) time.Time { return Epoch.Add(d) }
func (c *Clock) Elapsed() time.Duration       { return time.Duration(c.ns.Load()) }

// Loop is a discrete-event loop in virtual time, and the clock of what it
// drives: its time is that of the event being run. Events due at the same
// time run in the order they were scheduled. The zero Loop is at Epoch
// with nothing scheduled. Not safe for concurrent use: a simulation runs on
// one goroutine.
type Loop struct {
	now time.Duration
	seq uint64
	ev  eventHeap
}

func (l *Loop) Now() time.Time               { return Epoch.Add(l.now) }
func (l *Loop) At(d time.Duration) time.Time { return Epoch.Add(d) }
func (l *Loop) Elapsed() time.Duration       { return l.now }

// Schedule runs fn when virtual time reaches t.
func (l *Loop) Schedule(t time.Duration, fn func()) {
	l.seq++
	heap.Push(&l.ev, event{at: t, seq: l.seq, fn: fn})
}

// Next moves time to the next event due before end and returns it to be
// run; ok is false when no event is left before end, and time stays where
// it was.
func (l *Loop) Next(end time.Duration) (fn func(), ok bool) {
	if l.ev.Len() == 0 || l.ev[0].at >= end {
		return nil, false
	}
	e := heap.Pop(&l.ev).(event)
	l.now = e.at
	return e.fn, true
}

// AdvanceTo moves time to t without running anything, for ending a run at
// its end rather than at its last event.
func (l *Loop) AdvanceTo(t time.Duration) { l.now = t }

type event struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Lognormal is a token-count distribution: lognormal with the given mean
// and sigma, rounded and clamped to [1, Max] (0 = no upper bound), the
// model bench/load.Dist draws prompts and outputs from.
type Lognormal struct {
	Mean, Sigma float64
	Max         int
}

// Draw returns one count from r.
func (d Lognormal) Draw(r *rand.Rand) int {
	mu := math.Log(d.Mean) - d.Sigma*d.Sigma/2
	n := max(1, int(math.Round(math.Exp(mu+d.Sigma*r.NormFloat64()))))
	if d.Max > 0 {
		n = min(n, d.Max)
	}
	return n
}

// Step is a value (a capacity, a limit, a slowdown) that holds from At on,
// until the next Step of its schedule.
type Step[T any] struct {
	At time.Duration
	V  T
}
