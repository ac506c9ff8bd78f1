package control

import (
	"math"
	"slices"
	"time"
)

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
	// of the load it added bought nothing (throughputShare). A quarter
	// leaves room for a provider whose streams slow down with load but
	// whose total throughput still grows (decode-bound: half at the
	// concurrency where streams run at half speed).
	guardShare = 0.25
	// guardWindows: windows the part holds after taking back a step that
	// bought nothing, before probing again (the capacity may grow).
	guardWindows = 5
	// slowStartShare: slow start ends when a doubling raised throughput
	// by less than this share of the load it added.
	slowStartShare = 2.0 / 3
	// ackGain is slow start's growth per first token. TCP's slow start
	// grows by one segment per acknowledgement, and the acknowledged
	// segment has left the network: two go out per one answered, and the
	// window doubles per round trip. A first token frees no permit (the
	// stream holds it to its end): the limit grows by two for the same
	// two requests out per one answered, and doubles per time to first
	// token. By one, it would double per stream's length.
	ackGain = 2.0
	// minRateSamples: token-rate samples a window needs before its
	// per-stream rate counts for throughputShare. The median of a few
	// samples is off by a quarter now and then, as much as the guard's
	// whole margin, and the guard would take back a step that bought
	// throughput.
	minRateSamples = 10
)

// grow raises the part after an uncongested window if requests used the
// whole limit (an idle provider's limit must not inflate): from a cold
// start, doubling after the first window and then a round of growth per
// first token (startRound) per window, until the first congestion signal,
// the first window in which the load did not need the whole limit, or a
// round that bought less than slowStartShare of its load in throughput
// (slow start); doubling, capped at the
// capacity estimate, below an estimate that a cut the limit did not cause
// left standing (cutLittle); above it, probing by +1, +2 and then steps of
// sqrt(limit), 2 sqrt(limit) while windows stay uncongested and the limit
// stays busy. Never above the effective limit while another part binds.
// Growth must buy throughput (throughputShare): a step that did not is
// taken back, and the part holds there for guardWindows windows.
func (p *delayPart) grow(st windowStats, frozen bool) {
	last := p.last
	p.last = grownFrom{}
	// The window that closed was the round's: the limit grown per first
	// token during it is judged here like a step taken at its end.
	round := p.round
	p.round = 0
	if p.hold > 0 {
		p.hold--
		return
	}
	if p.tookBack(last, st) {
		return
	}
	if p.over > 0 && p.est >= p.over {
		// Back at the limit of the last cut: the windows below it said
		// nothing about room above it, so the probe above it takes a +2
		// step before the sqrt(limit) ones (grow's streak counts from
		// here).
		p.over, p.streak = 0, min(p.streak, 1)
	}
	faster := false
	if p.known > 0 && (p.est >= p.known && p.faster(st) || p.fasterThanBefore(st)) {
		faster = true
		// Streams decode faster than when the baseline was learned, or
		// than in the window before, at no less load: the provider has
		// more room than when the capacity estimate was made (capacity
		// came back). Growth goes straight to the sqrt(limit) steps
		// rather than +1, +2 first. The window before is what sees a
		// capacity come back after a step down: the baseline's windows
		// were learned at the old load, not at the reduced one. Not slow
		// start: a baseline learned during host stalls reads
		// every later window as faster, and doubling from there ran
		// into the provider's refusals (bursts with long stalls).
		p.streak = max(p.streak, slowStartAfter)
	}
	full := p.est
	if round > 0 {
		// The round grew the limit as its first tokens came: the requests
		// dispatched on the last permits it added have not answered yet,
		// and the load used the whole limit if it used the limit the
		// round started at.
		full = round
	}
	if st.maxInflight < int(full) {
		if p.known == 0 {
			// The load needs less than the limit: the cold start is over.
			// Demand that comes later probes up from here (+1, +2, ...)
			// rather than doubling straight past the capacity: a burst
			// after a light start doubled into the provider's refusals.
			p.known = p.est
		}
		return // the load did not need the whole limit: no growth
	}
	if frozen || float64(p.value()) > p.eff {
		return
	}
	if p.known == 0 && p.sp == nil {
		if p.windows == 1 {
			p.est = math.Min(p.max, p.nextStep(st))
		}
		switch {
		case p.est < p.max:
			p.startRound(st, p.est)
		case round > 0 && round < p.est:
			// At the ceiling no round grows, but the round that closed
			// grew the limit to it: the window after this one judges that
			// growth as a step from where the round started (a congested
			// window cuts no lower, as after a doubling).
			p.last = grownFrom{est: round, load: st.meanInflight, rate: st.rate, rates: st.rates, median: st.median.Seconds(), n: st.n}
		}
		return
	}
	var next float64
	if p.recall > p.est && p.known > 0 && p.known < p.recall && p.clock.Sub(p.recallAt) <= recallFor && p.fasterThanBefore(st) && st.rate > p.ref.rate()/(1-minTolerance) {
		// Streams decode faster than in the window before at no less
		// load, and than the baseline's (faster than the window before
		// only is a window after a host stall: fasterBlock), and the part
		// remembers the capacity from before its
		// latest fall: the capacity came back, seen by a whole window
		// where recallOnRate's blocks of samples did not decide (a cut
		// just after the step reset them, and by the time they ran again
		// the window before was already fast). The limit doubles toward
		// the remembered level at once, as recallOnRate does, rather than
		// taking a sqrt(limit) step per window to it (capacity 20 -> 40:
		// 20, 29, 40 over two windows, half the provider idle meanwhile).
		p.known, p.recall = p.recall, 0
		next = math.Min(p.known, slowStartGain*p.est)
	} else {
		next = p.nextStep(st)
	}
	if p.over > 0 && p.known > 0 && p.known <= p.est && !faster && next > p.est+2 {
		// A sqrt(limit) step from below the limit of the last cut stops
		// at that limit: uncongested windows below it are no evidence of
		// room above it. Counted as the probe's streak, they would take a
		// limit cut just below the capacity through two small steps
		// straight to a sqrt(limit) step past it. Not when the streams
		// decode faster: that is room.
		next = math.Min(next, p.over)
	}
	if next := math.Min(p.max, next); next > p.est {
		p.last = grownFrom{est: p.est, load: st.meanInflight, rate: st.rate, rates: st.rates, median: st.median.Seconds(), n: st.n}
		p.est = next
	}
}

// startRound opens a round of slow start at the current limit after the
// busy, uncongested window st: every first token of the round grows the
// limit by ackGain (ackGrow), as TCP's slow start grows by one segment per
// acknowledgement. Doubled at the end of a window instead, the limit
// waited a round of the limit (every permit answered once) per doubling,
// while the requests a doubling lets in answer within one time to first
// token: at a capacity of thousands, seconds of ramp with the clients
// waiting in Sluice's queue. The round's window is judged at its end as a
// doubling was (tookBack, cutLittle): st is the window before the step,
// from the limit it started at (the round's before, which st found
// uncongested: a congested window after it cuts no lower).
func (p *delayPart) startRound(st windowStats, from float64) {
	p.last = grownFrom{est: from, load: st.meanInflight, rate: st.rate, rates: st.rates, median: st.median.Seconds(), n: st.n}
	p.round = p.est
	p.roundN, p.roundOver, p.roundQueued = 0, 0, false
	p.roundBlock = max(2*p.minSamples, int(p.round/4))
	p.roundMark = p.base + p.tolerance(p.roundBlock)
}

// ackGrow takes one first token of the current round (normalised TTFT
// ttft, seconds) and grows the part by ackGain, unless:
//
//   - the load did not use half the limit: the most requests in flight
//     at a dispatch of the latest windows (inflight) is under half of it,
//     as TCP grows only a window the sender fills (Linux's
//     tcp_is_cwnd_limited). An idle provider's limit inflates to twice
//     its load at most, and the end of the round sees the rest
//     (grow: the cold start is over);
//   - the round's first tokens show a queue: the first tokens are judged
//     in blocks (2 x WindowSamples, or a quarter of the limit the round
//     started at), and once more than half of a block came slower than
//     the baseline's band for a median of that many, the window's median
//     will be congested, and growth stops for the rest of the round:
//     growth compounds once per time to first token, and left to the end
//     of the window it would run the limit to several times the
//     provider's capacity;
//   - a Retry-After freezes growth, or another part binds lower;
//   - the cold start is over (a capacity estimate is known): as TCP's slow
//     start ends at ssthresh, growth back toward the estimate after a cut
//     doubles once per window instead. Per first token it reached the
//     estimate before a window could see the provider had less, and a
//     capacity step down took several times as long to settle.
//
// It reports whether the part grew.
func (p *delayPart) ackGrow(ttft float64, inflight int, frozen bool, eff float64) bool {
	if p.round == 0 || p.roundQueued {
		return false
	}
	if ttft > p.roundMark {
		p.roundOver++
	}
	if p.roundN++; p.roundN >= p.roundBlock {
		if 2*p.roundOver > p.roundN {
			p.roundQueued = true
			return false
		}
		p.roundN, p.roundOver = 0, 0
	}
	if frozen || p.est > eff || p.known > 0 || p.est >= 2*float64(inflight) {
		return false
	}
	top := p.max
	if p.known > p.est {
		top = math.Min(top, p.known)
	}
	if p.est >= top {
		return false
	}
	p.est = math.Min(top, p.est+ackGain)
	return true
}

// growBlind doubles the part, up to the ceiling, after a window of busy
// answers that carried no delay sample (observeAnswered): it steps out of
// the way of a limit it cannot measure. Not during a Retry-After freeze,
// and not while another part binds lower: refusals still cut the loss
// part, and the limit is then the loss part's.
func (p *delayPart) growBlind(now time.Time, frozen bool, eff float64) {
	if frozen || float64(p.value()) > eff || p.est >= p.max {
		return
	}
	p.est = math.Min(p.max, slowStartGain*p.est)
	p.round = 0
	if p.sp != nil {
		p.sp.estimate = p.est
	}
	p.last = grownFrom{}
	p.lastChange = now
}

// tookBack judges the growth step from the window before (last; est 0 =
// no step) by the window st after it: a step that bought no throughput is
// taken back and the part holds (true); a slow-start doubling that bought
// less than slowStartShare ends slow start.
func (p *delayPart) tookBack(last grownFrom, st windowStats) bool {
	if last.est == 0 {
		return false
	}
	share, ok := throughputShare(last, st)
	switch {
	case ok && share < guardShare:
		// The step bought nothing: take it back.
		p.est = math.Min(p.est, last.est)
		p.congestionSignal(p.est)
		p.hold = guardWindows
		p.guarded++
		return true
	case ok && share < slowStartShare && p.known == 0:
		// Slow start doubles only while throughput keeps nearly in step
		// with the load: streams that slow down as the load rises show a
		// provider filling up, and the next doubling would land far past
		// its capacity.
		p.known = p.est
		// The doubling may already be past it, the rest queued inside
		// the provider behind the streams it serves: the estimate comes
		// down to the most it served in the window (streams past their
		// first token, and those in prefill at no load), never below
		// where the doubling started. Left at the doubling, the queue
		// would show in the next window, and Little's law on that
		// transient queue would cut far below the capacity while the
		// backlog drained.
		if st.maxDecoding > 0 {
			if served := math.Ceil(float64(st.maxDecoding) + p.rate*p.base); served < p.est {
				p.est = math.Max(served, last.est)
				p.known = p.est
			}
		}
	}
	return false
}

// nextStep is where growth after the busy, uncongested window st goes:
// double (slow start; up to the capacity estimate below it), or probe
// above the estimate (+1, +2, then sqrt(limit) steps).
func (p *delayPart) nextStep(st windowStats) float64 {
	next := slowStartGain * p.est
	switch {
	case p.known > p.est:
		// Below the capacity estimate (a cut that the limit did not
		// cause): slow start back to it.
		next = math.Min(next, p.known)
	case p.known > 0:
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
			// Doubling the limit itself overshoots a provider that refuses
			// at a small multiple of its capacity: every request admitted
			// by the doubling is refused before the first refusal comes
			// back. Steps that kept doubling (sqrt(limit) x 2^k) leave
			// half the capacity again queued in the provider for seconds.
			next = p.est + math.Sqrt(p.est)*math.Ldexp(1, min(p.streak-slowStartAfter, 1))
		}
	}
	return next
}

// slowStart reports whether growth doubles the limit: no capacity estimate
// yet, or the limit is below it.
func (p *delayPart) slowStart() bool { return p.known == 0 || p.est < p.known }

// grownFrom is the window before a growth step: its load and per-stream
// token rate, and the limit before the step (0 = the part did not grow).
type grownFrom struct {
	est, load, rate float64
	rates           int     // token-rate samples behind rate
	median          float64 // the window's median normalised TTFT, seconds
	n               int     // TTFT samples behind median
}

// throughputShare is the share of the load growth from the window before
// a growth step to st that throughput followed (log scale: 1 = in
// proportion, 0 = none), and false when it cannot be told (no token-rate
// samples, or the load did not grow by 5%). The provider's output
// throughput is the load x the per-stream rate (every in-flight stream
// decodes at about the median rate). Below guardShare the step bought
// nothing: the per-stream rate fell nearly as much as the load rose, and
// the provider only shares the same throughput among more streams (Uber's
// Cinnamon stops growing when throughput stops following in-flight). A
// queueing provider keeps the per-stream rate and says nothing here (its
// TTFT does); without token-rate samples (short or non-streaming answers)
// the guard is off.
func throughputShare(before grownFrom, st windowStats) (float64, bool) {
	if before.rates < minRateSamples || st.rates < minRateSamples || before.load <= 0 || st.meanInflight < 1.05*before.load {
		return 0, false
	}
	loadGain := math.Log(st.meanInflight / before.load)
	return 1 + math.Log(st.rate/before.rate)/loadGain, true
}

// boughtThroughput reports whether the growth step before the window st
// bought more throughput than latency: Kleinrock's power (throughput over
// latency) rose from the window before the step to st. Throughput is the
// load x the per-stream token rate (throughputShare), latency the window's
// median TTFT. Past a knee, more streams share the same throughput and
// each waits longer: power falls, and the latency is congestion. A
// provider with room for more, whose streams slow a little as its host
// fills, serves more with every step: power rises, and the latency the
// step added is the price of that throughput, not a queue. False when it
// cannot be told (no step, too few token-rate samples, too little load
// added). Power must rise by more than the noise of the two windows'
// medians (noiseZ standard errors of their difference, relative to the
// baseline), so that a few samples per window, at a small scale, do not
// take a noisy or queueing window for a price paid.
func (p *delayPart) boughtThroughput(st windowStats) bool {
	last := p.last
	if last.est == 0 || last.median <= 0 || st.median <= 0 || last.n == 0 || p.base <= 0 {
		return false
	}
	share, ok := throughputShare(last, st)
	if !ok {
		return false
	}
	loadGain := math.Log(st.meanInflight / last.load)
	margin := noiseZ * 1.2533 * p.noise / p.base * math.Sqrt(1/float64(st.n)+1/float64(last.n))
	return share*loadGain-math.Log(st.median.Seconds()/last.median) > margin
}

// recallFor is how long the capacity estimate from before a fall is kept
// (recall).
const recallFor = 2 * time.Minute

// recallSamples is how many token-rate samples recallOnRate judges at a
// time: as many as a window's guard needs (minRateSamples) and a few
// more, so that one stream cannot decide. recallBlocks blocks in a row
// must read faster: the first samples after a host stall read fast too
// (the tokens held up by the stall arrive together), for one block, not
// two: one block deciding would double the limit into refusals.
const (
	recallSamples = 16
	recallBlocks  = 2
	// recallHold: the blocks that read faster must span at least this
	// long. A host stall's held-up tokens arrive within milliseconds, as
	// many samples as there are streams or more, enough for two blocks;
	// a provider with room again keeps its streams faster.
	recallHold = time.Second
)

// recentRates is the block of token-rate samples recallOnRate is filling.
type recentRates struct {
	rate     [recallSamples]float64
	inflight [recallSamples]int
	n        int       // samples in the block
	passed   int       // blocks in a row that read faster
	start    time.Time // first sample of the block being filled
	since    time.Time // first sample of the first of the passed blocks
}

// recallOnRate takes one token-rate sample (dispatched at inflight) and
// returns the capacity estimate to its level from before its latest fall
// as soon as streams decode faster at no less load (fasterBlock) in
// recallBlocks blocks of recallSamples samples in a row, over at least
// recallHold: the capacity came
// back, seen within two seconds of the step rather than a window or two
// later (a window lasts 2-4 s at a limit of 20, and the first one after
// the step is half old). Only after the fall is over (an uncongested
// window since: while the provider works off the backlog of a fall,
// streams speed up as it shrinks). The limit doubles, at most up to the
// remembered level: the first doubling now, the next ones per window
// (grow). It reports whether the part moved.
func (p *delayPart) recallOnRate(now time.Time, rate float64, inflight int) bool {
	r := &p.recent
	if p.recall == 0 || p.known >= p.recall || p.est >= p.recall || now.Sub(p.recallAt) > recallFor || !p.recallCalm {
		r.n, r.passed = 0, 0
		return false
	}
	if r.n == 0 {
		r.start = now
	}
	r.rate[r.n], r.inflight[r.n] = rate, inflight
	if r.n++; r.n < recallSamples {
		return false
	}
	r.n = 0
	if !p.fasterBlock() {
		r.passed = 0
		return false
	}
	if r.passed == 0 {
		r.since = r.start
	}
	if r.passed++; r.passed < recallBlocks || now.Sub(r.since) < recallHold {
		return false
	}
	p.known, p.recall, r.passed = p.recall, 0, 0
	p.est = math.Min(p.known, math.Min(p.max, slowStartGain*p.est))
	p.last = grownFrom{}
	p.round = 0
	p.lastChange = now
	return true
}

// fasterBlock reports whether the full block of recent token-rate samples
// reads faster than the latest window (median rate more than
// minTolerance above its, mean in-flight count within minTolerance of its
// load) and than the baseline's windows. Faster than the window before
// but not than the baseline's streams is a window that was slow for
// another reason (a stalled host delivers its tokens late), not a
// provider short of room.
func (p *delayPart) fasterBlock() bool {
	r := &p.recent
	b := p.prev
	if b.rates < minRateSamples || b.rate <= 0 {
		return false
	}
	sorted := r.rate
	slices.Sort(sorted[:])
	median := (sorted[recallSamples/2-1] + sorted[recallSamples/2]) / 2
	load := 0
	for _, n := range r.inflight {
		load += n
	}
	return median > b.rate/(1-minTolerance) &&
		float64(load)/recallSamples >= (1-minTolerance)*b.load &&
		median > p.ref.rate()/(1-minTolerance)
}
