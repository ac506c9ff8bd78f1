package control

import (
	"math"
	"slices"
)

// reference is what the learned delay part compares a window with: the
// last baseMemory windows it accepted as uncongested (their medians,
// spreads, sample counts and loads), summarised by medians, so that one
// odd window (a median floored at 1 ms because most of its prompts'
// prefill estimates exceeded their TTFT, a burst of slow requests) moves
// nothing. A fixed ring: adding never allocates.
//
// Not safe for concurrent use: the controller's mutex guards it.
type reference struct {
	ring       [baseMemory]refWindow
	next, size int
}

// refWindow is one accepted window: its median and load, its sample count
// and the sum of its samples' absolute deviations from its median.
type refWindow struct {
	median, absDev, load, rate float64
	n                          int
}

func (r *reference) add(w refWindow) {
	r.ring[r.next] = w
	r.next = (r.next + 1) % len(r.ring)
	r.size = min(r.size+1, len(r.ring))
}

// reset keeps only w.
func (r *reference) reset(w refWindow) {
	*r = reference{}
	r.add(w)
}

// empty reports whether no window was accepted yet.
func (r *reference) empty() bool { return r.size == 0 }

// base is the median of the accepted windows' medians, seconds.
func (r *reference) base() float64 {
	return r.medianOf(func(w refWindow) (float64, bool) { return w.median, true })
}

// noise is the per-sample standard deviation of normalised TTFT, seconds,
// pooled over the accepted windows: their mean absolute deviation from
// their medians x 1.2533 (sigma / mean absolute deviation of a normal
// distribution), or prior x base while they hold fewer than 10 samples.
func (r *reference) noise(prior float64) float64 {
	var dev float64
	n := 0
	for i := 0; i < r.size; i++ {
		dev += r.ring[i].absDev
		n += r.ring[i].n
	}
	if n < 10 {
		return prior * r.base()
	}
	return 1.2533 * dev / float64(n)
}

// rate is the median per-stream token rate of the accepted windows that
// saw token-rate samples (0 = none).
func (r *reference) rate() float64 {
	return r.medianOf(func(w refWindow) (float64, bool) { return w.rate, w.rate > 0 })
}

// load is the median in-flight count of the accepted windows.
func (r *reference) load() float64 {
	return r.medianOf(func(w refWindow) (float64, bool) { return w.load, true })
}

// samples is how many samples the baseline stands on, for its standard
// error: k^2 / sum(1/n_i) over the k accepted windows of n_i samples each.
// The baseline is a median of the windows' medians, each as good as its
// own count of samples: one window of twenty among windows of thousands
// weighs as much as any, and the variance of k such medians taken
// together is the sum of theirs over k^2. For windows of equal size it is
// their total. Counted as the total, the cold start's small first window
// next to one full window at a capacity of thousands made a narrow band
// around a baseline that window's noise had set low, and windows below
// the capacity read congested.
func (r *reference) samples() float64 {
	var inv float64
	total, equal := 0, true
	for i := 0; i < r.size; i++ {
		n := max(r.ring[i].n, 1)
		inv += 1 / float64(n)
		total += n
		equal = equal && n == max(r.ring[0].n, 1)
	}
	if inv == 0 || equal {
		return float64(total) // exact where the sum of reciprocals rounds
	}
	return float64(r.size*r.size) / inv
}

func (r *reference) medianOf(get func(refWindow) (float64, bool)) float64 {
	var buf [baseMemory]float64
	k := 0
	for i := 0; i < r.size; i++ {
		if v, ok := get(r.ring[i]); ok {
			buf[k] = v
			k++
		}
	}
	if k == 0 {
		return 0
	}
	s := buf[:k]
	slices.Sort(s)
	return (s[(k-1)/2] + s[k/2]) / 2
}

// Constants of the learned baseline (learn, follow, rebase):
const (
	// refusalMargin: windows that ran above this share of the in-flight
	// count at which the provider refused for lack of capacity are close
	// to its overload point, so their TTFT is not a no-load TTFT. A
	// provider that queues refuses at some multiple of its capacity (or of
	// the knee beyond which it slows down), and a quarter below the
	// refusal point is still above that capacity.
	refusalMargin = 0.75
	// calmDecay: the limit a rebase returns to forgets by 2% per window
	// (about a minute of 2 s windows), so a provider that got slower in
	// several steps, each read as congestion first, gets the limit it
	// had before the first step back, not the one after the last cut.
	calmDecay = 0.98
)

// slower reports whether the congested window st shows a provider that
// got slower rather than a congested one: at no more load than the
// baseline was learned at, its streams decode more slowly than the
// baseline's windows did (by more than minTolerance), and its TTFT rose
// by less than twice that factor. A uniformly slower provider makes every
// phase of a request longer by the same factor (the normalised TTFT, with
// an estimated prefill subtracted, rises by up to about twice it);
// queueing raises TTFT by many times what it slows the streams, if it
// slows them at all; and a provider that slows with load does so at more
// load, not the same.
func (p *delayPart) slower(st windowStats) bool {
	ref := p.ref.rate()
	if ref <= 0 || st.rate <= 0 || st.meanInflight > p.baseLoad {
		return false
	}
	slowdown := ref / st.rate
	return slowdown > 1/(1-minTolerance) && st.median.Seconds() < 2*slowdown*p.base
}

// faster reports whether streams in window st decode faster than in the
// baseline's windows (by more than minTolerance) at no less load than the
// baseline was learned at: the provider is less loaded than when the
// baseline was learned.
func (p *delayPart) faster(st windowStats) bool {
	ref := p.ref.rate()
	if ref <= 0 || st.rate <= 0 || st.meanInflight < p.baseLoad || p.ref.size < baseMemory/2 {
		return false
	}
	return st.rate > ref/(1-minTolerance)
}

// fasterThanBefore reports whether streams in window st decode faster (by
// more than minTolerance) than in the window before it, at no less load
// (within minTolerance), both with minRateSamples token-rate samples: the
// provider got more room between the two windows (its capacity came back).
func (p *delayPart) fasterThanBefore(st windowStats) bool {
	b := p.before
	if b.rates < minRateSamples || st.rates < minRateSamples || st.meanInflight < (1-minTolerance)*b.load {
		return false
	}
	return st.rate > b.rate/(1-minTolerance)
}

// congestedRun follows a run of congested windows: the first window's
// median and load, and the limit before the run.
type congestedRun struct {
	median, load, from  float64
	windows, unanswered int
	// weight is the run's congested windows as they count toward its
	// forced cut (learn).
	weight float64
}

// Constants of the congested-run experiment (learn):
const (
	// runCut: a quarter of the load is the smallest cut whose answer
	// stands out of the noise of a window median (a quarter less load
	// takes a quarter to all of the excess delay away under congestion).
	runCut = 0.75
	// runAnswer: the share of the excess delay that must be gone after
	// the cut for the run to count as congestion. A provider whose
	// latency grows in proportion to the load beyond a knee answers a
	// quarter less load with at least half of the excess gone (all of it
	// at up to 4/3 of the knee); a slower provider answers with none.
	runAnswer = 0.25
	// runWindows: congested windows in a row before the cut is forced
	// (those with less than one request queued count half).
	runWindows = 3
)

// follow offers the uncongested window st to the reference. It is taken
// when its median is within half the band above the baseline (or below
// it) and, if above, it did not run near the provider's refusal point. A
// window between half and the whole band is not congested enough to cut
// for, nor clean enough to learn from: taking it would let a load a
// little past a knee (inside the band, a little slower per step) walk the
// baseline up step by step with the limit, until the provider refuses.
func (p *delayPart) follow(st windowStats, tol float64, nearRefusal bool) {
	m := st.median.Seconds()
	if m > p.base && (nearRefusal || m-p.base > tol/2) {
		return
	}
	p.ref.add(refWindow{median: m, absDev: st.absDev, load: st.meanInflight, rate: st.rate, n: st.n})
	p.summarise()
}

// summarise refreshes base, noise, baseLoad and baseSamples from ref.
func (p *delayPart) summarise() {
	p.base = p.ref.base()
	p.noise = p.ref.noise(priorNoise)
	p.baseLoad = p.ref.load()
	p.baseSamples = p.ref.samples()
}

// rebase takes m as the new baseline after a congested run that less load
// did not answer, and undoes the run's cuts.
func (p *delayPart) rebase(st windowStats) {
	p.ref.reset(refWindow{median: st.median.Seconds(), absDev: st.absDev, load: st.meanInflight, rate: st.rate, n: st.n})
	p.summarise()
	p.est = math.Max(p.est, p.run.from)
	p.run = congestedRun{}
	p.last = grownFrom{}
	p.rebases++
}
