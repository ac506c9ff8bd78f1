package control

import (
	"math"
	"slices"
	"time"
)

// Baseline is a learned TTFT baseline as a fleet of replicas shares it: a
// replica that starts (or whose controller was rebuilt by a reload) has no
// baseline, and its first window would become the reference whatever load
// it ran at. Seeded with the fleet's baseline, it judges its first window
// against what the others learned instead: it starts warm.
type Baseline struct {
	// TTFT is the no-load prompt-normalised TTFT: the median of the
	// accepted windows' medians.
	TTFT time.Duration
	// Noise is the per-sample standard deviation of normalised TTFT.
	Noise time.Duration
	// Load is the in-flight count the baseline was learned at.
	Load float64
	// TokenRate is the per-stream output tokens/s of the accepted windows
	// (0: none measured).
	TokenRate float64
	// Samples is the mean number of samples per accepted window: a seed
	// weighs as much as one window of the replica that learned it.
	Samples int
}

// maxSeedSamples bounds a seed's weight, whatever a peer published.
const maxSeedSamples = 100000

// valid reports whether b can seed a controller.
func (b Baseline) valid() bool {
	ok := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) && x >= 0 }
	return b.TTFT > 0 && b.TTFT <= maxTTFT && b.Noise >= 0 && b.Noise <= maxTTFT &&
		ok(b.Load) && ok(b.TokenRate) && b.Samples >= 1
}

// LearnedBaseline returns the baseline learned so far; false while the
// controller is cold (no window accepted yet), in set-point mode, or
// without a delay part. Safe for concurrent use.
func (c *adaptiveController) LearnedBaseline() (Baseline, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.delay
	if p == nil || p.sp != nil || p.ref.empty() {
		return Baseline{}, false
	}
	return Baseline{
		TTFT:      time.Duration(p.base * float64(time.Second)),
		Noise:     time.Duration(p.noise * float64(time.Second)),
		Load:      p.baseLoad,
		TokenRate: p.ref.rate(),
		Samples:   max(1, int(p.baseSamples)/p.ref.size),
	}, true
}

// SeedBaseline gives a cold controller b as its one accepted window and
// reports whether it took it (false when not cold, or b is not valid).
// The seed is one window among the baseMemory the baseline is the median
// of: the controller's own uncongested windows outvote it from its second
// and push it out after baseMemory. Safe for concurrent use.
func (c *adaptiveController) SeedBaseline(b Baseline) bool {
	if !b.valid() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.delay
	if p == nil || p.sp != nil || !p.ref.empty() {
		return false
	}
	n := min(b.Samples, maxSeedSamples)
	// absDev is what reference.noise pools: n samples whose mean absolute
	// deviation is sigma / 1.2533.
	p.ref.add(refWindow{median: b.TTFT.Seconds(), absDev: b.Noise.Seconds() / 1.2533 * float64(n), load: b.Load, rate: b.TokenRate, n: n})
	p.summarise()
	// The reference exists: the first own window needs no more samples
	// than any other.
	c.win.need = c.s.WindowSamples
	return true
}

// MedianBaseline is the field-wise median of bs (the zero Baseline for
// none): what a replica seeds itself with from the live replicas'
// baselines, so that one replica with an odd baseline moves nothing.
func MedianBaseline(bs []Baseline) Baseline {
	if len(bs) == 0 {
		return Baseline{}
	}
	med := func(get func(Baseline) float64) float64 {
		v := make([]float64, len(bs))
		for i, b := range bs {
			v[i] = get(b)
		}
		slices.Sort(v)
		return (v[(len(v)-1)/2] + v[len(v)/2]) / 2
	}
	return Baseline{
		TTFT:      time.Duration(med(func(b Baseline) float64 { return float64(b.TTFT) })),
		Noise:     time.Duration(med(func(b Baseline) float64 { return float64(b.Noise) })),
		Load:      med(func(b Baseline) float64 { return b.Load }),
		TokenRate: med(func(b Baseline) float64 { return b.TokenRate }),
		Samples:   int(med(func(b Baseline) float64 { return float64(b.Samples) })),
	}
}
