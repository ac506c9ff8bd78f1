package adaptive

import "math"

// Constants of the delay part's growth (grow):
const (
	// slowStartGain is slow start's growth per window, TCP's.
	slowStartGain = 2.0
	// slowStartAfter: uncongested windows in a row, with requests waiting
	// for the limit, after which the steps grow faster (sqrt(limit), then
	// 2 sqrt(limit)): the capacity has grown, and finding it by +1 a
	// window would take tens of seconds.
	slowStartAfter = 3
	// guardShare: growth that raised throughput by less than this share
	// of the load it added bought nothing (boughtNothing). A quarter
	// leaves room for a provider whose streams slow down with load but
	// whose total throughput still grows (decode-bound: half at the
	// concurrency where streams run at half speed).
	guardShare = 0.25
	// guardWindows: windows the part holds after taking back a step that
	// bought nothing, before probing again (the capacity may grow).
	guardWindows = 5
)

// grow raises the part after an uncongested window if requests used the
// whole limit (an idle provider's limit must not inflate): doubling until
// the first congestion signal or the first window in which the load did
// not need the whole limit (slow start), then probing above the last
// congestion level by +1, +2 and then steps of sqrt(limit), 2 sqrt(limit)
// while windows stay uncongested and the limit stays busy.
// Growth must buy throughput (boughtNothing): a step that did not is taken
// back, and the part holds there for guardWindows windows.
func (p *delayPart) grow(st windowStats, frozen bool) {
	last := p.last
	p.last = grownFrom{load: st.meanInflight, rate: st.rate}
	if p.hold > 0 {
		p.hold--
		return
	}
	if last.est > 0 && boughtNothing(last, st) {
		p.est = math.Min(p.est, last.est)
		p.congestionSignal(p.est)
		p.hold = guardWindows
		p.guarded++
		return
	}
	if st.maxInflight < int(p.est) {
		if p.known == 0 {
			// The load needs less than the limit: the cold start is over.
			// Demand that comes later probes up from here (+1, +2, ...)
			// rather than doubling straight past the capacity: a burst
			// after a light start doubled into the provider's refusals.
			p.known = p.est
		}
		return
	}
	if frozen {
		return
	}
	next := slowStartGain * p.est
	if p.known > 0 {
		// Faster steps need the limit busy for the whole window, not a
		// peak: a burst of arrivals after a quiet spell fills the limit
		// for a moment while most of the window ran below it, and faster
		// growth then overshot into the provider's refusals (bursts).
		p.streak++
		busy := st.meanInflight >= p.est-math.Max(1, math.Sqrt(p.est))
		switch {
		case p.streak < slowStartAfter || !busy:
			next = p.est + math.Ldexp(1, min(p.streak, slowStartAfter)-1)
		default:
			// Past the last congestion level, a step of sqrt(limit), then
			// steps of 2 sqrt(limit) while windows stay uncongested and
			// busy, never more: every permit a step adds is used at once
			// when requests wait, so a step is how many requests can land
			// in the provider's queue before one window sees it.
			// Doubling the limit itself overshot a provider that refuses
			// at 1.5x its capacity (overload-2x on the wire: 19-21
			// refusals a run where fixed@80 drew 600-800, every request
			// admitted by the doubling refused before the first refusal
			// came back); steps that kept doubling (sqrt(limit) x 2^k)
			// went 38 -> 60 on a capacity of 40 and left 20 requests in
			// the provider's queue for up to 7 s (overload-2x in virtual
			// time: provider TTFT p99 6.3 s; 4.0 s with the cap, and the
			// same completions and settling on every other shape).
			next = p.est + math.Sqrt(p.est)*math.Ldexp(1, min(p.streak-slowStartAfter, 1))
		}
	}
	if next = math.Min(p.max, next); next > p.est {
		p.last.est = p.est
		p.est = next
	}
}

// grownFrom is the window before a growth step: its load and per-stream
// token rate, and the limit before the step (0 = the part did not grow).
type grownFrom struct {
	est, load, rate float64
}

// boughtNothing reports whether growth from the window before (load and
// per-stream token rate) to the window st bought no throughput. The
// provider's output throughput is the load x the per-stream rate (every
// in-flight stream decodes at about the median rate); growth that raised
// the load by r raised it by less than a quarter of r when the per-stream
// rate fell nearly as much: the provider only shares the same throughput
// among more streams (Uber's Cinnamon stops growing when throughput stops
// following in-flight). A queueing provider keeps the per-stream rate and
// says nothing here (its TTFT does); without token-rate samples (short or
// non-streaming answers) the guard is off.
func boughtNothing(before grownFrom, st windowStats) bool {
	if before.rate <= 0 || st.rate <= 0 || before.load <= 0 || st.meanInflight < 1.05*before.load {
		return false
	}
	loadGain := math.Log(st.meanInflight / before.load)
	throughputGain := loadGain + math.Log(st.rate/before.rate)
	return throughputGain < guardShare*loadGain
}
