package control

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// gradientQueueSize is the growth allowance of the delay part at a given
// limit: max(2, sqrt(limit)), as Gradient2 has it. With a constant
// allowance the limit would grow as fast at 5 as at 500.
func gradientQueueSize(limit int) int {
	return max(2, int(math.Sqrt(float64(limit))))
}

// Constants of the learned delay part. Each follows from a property of the
// signal, not from a scenario:
const (
	// noiseZ is how many standard errors above the baseline a window
	// median must be to count as congestion: a window of uncongested
	// samples reads as congested about once in 160 windows (one-sided
	// normal tail at 2.5).
	noiseZ = 2.5
	// minTolerance is the narrowest band, as a fraction of the baseline
	// (10%). With thousands of samples per window the standard error is
	// tiny, and a TTFT 10% above its baseline is not worth a cut.
	minTolerance = 0.1
	// priorNoise is the per-sample spread of normalised TTFT relative to
	// the first window's median, assumed while no window has measured one
	// (a little above what lognormal jitter of a typical provider gives).
	priorNoise = 0.5
	// baseMemory is how many accepted (uncongested) windows the baseline
	// is the median of. Congested windows are never accepted, so
	// congestion cannot become the baseline.
	baseMemory = 10
	// maxCut bounds one window's cut to half the limit, as Gradient2 does.
	maxCut = 0.5
)

// delayPart is the delay-based part of a gradient2 controller. It is fed
// one closed delayWindow at a time (median prompt-normalised TTFT, its
// spread, the in-flight counts and the per-stream token rate seen), never
// single requests.
//
// Two modes:
//
//   - Learned baseline (TTFTTarget == 0). The gradient is computed here,
//     not by the library's Gradient2Limit: the library has no noise
//     tolerance and no slow start, and its long-term average follows every
//     window, congested or not, so it can learn a congested baseline and
//     sit at the provider's refusal point. A window is
//     congested when its median is more than noiseZ standard errors (and
//     at least minTolerance) above the baseline, the median of the last
//     baseMemory uncongested windows (baseline.go); the standard error
//     comes from the noise measured in those windows, so a noisy provider
//     gets a wider band and a quiet one a narrow band.
//   - Set-point (TTFTTarget > 0): setpointLimit (setpoint.go), the window
//     median held at the configured target.
//
// In learned mode, a congested window cuts to the in-flight count it ran
// at minus the requests queued inside the provider, which by Little's law
// is the excess delay x the rate requests go through (first tokens per
// second): a noise-sized excess is a small cut, a queue is removed in one
// step. Where the provider visibly queues (far fewer streams past their
// first token than in flight, two windows in a row), the cut goes to the
// number it serves (cutLittle). A run of congested windows that less load
// does not answer is a
// provider that got slower, not a congested one: the baseline is learned
// again and the cuts undone (baseline.go). A congested window whose load
// ran well below the limit did not queue because of the limit: it cuts
// (the provider needs the relief) but keeps the capacity estimate, and
// growth below the estimate is slow start back to it. After a fall of the
// estimate, streams that decode faster at no less load between windows
// take the limit back toward the estimate from before the fall, never past
// it (recallOnRate). An uncongested
// window grows the part if requests used the whole limit: from a cold
// start, doubling and then two per first token until the first congestion
// signal (slow start), then +1, +2
// and steps of sqrt(limit), then 2 sqrt(limit), while windows stay
// uncongested (growth.go), as long as growth buys throughput.
//
// Not safe for concurrent use: the controller's mutex guards it.
type delayPart struct {
	min, max float64
	est      float64        // the part's limit, in [min, max]
	sp       *setpointLimit // set-point mode when non-nil

	// ref holds the windows behind the learned baseline; base, noise,
	// baseLoad and baseSamples are its summary, refreshed when it changes.
	ref         reference
	base        float64 // no-load normalised TTFT, seconds
	baseLoad    float64 // in-flight count the baseline was learned at
	baseSamples float64 // samples behind the baseline: its standard error is noise/sqrt(baseSamples)
	// noise is the per-sample standard deviation of normalised TTFT in
	// seconds.
	noise float64
	rate  float64 // first tokens per second, smoothed over windows

	// known is the limit at the last congestion signal (0 = none yet): the
	// best estimate of the capacity. Below it nothing is known to be wrong;
	// at or above it growth probes: +1, +2, +4, ... per uncongested window
	// in a row (streak), so a limit near the capacity moves by one request
	// at a time and a capacity that has grown is found in a few windows.
	known  float64
	streak int
	// over is the limit in effect when the part last cut for its own
	// congested window (0 = none, or reached since): a level where the
	// provider was seen congested. Growth from below it does not leap past
	// it, and the probe above it starts again once it is reached (grow).
	over float64
	// recall is the capacity estimate from before the latest fall of
	// known (0 = none), kept until recallAt+recallFor: where slow start
	// may return to when the capacity comes back (recallOnRate). recallAt
	// is the latest fall from that level (within minTolerance of it).
	recall   float64
	recallAt time.Time
	// recallCalm: an uncongested window has closed since recall was set
	// (the fall is over; streams that speed up while the provider still
	// works off the backlog of the fall are no capacity coming back).
	recallCalm bool
	clock      time.Time // when the latest window closed
	// recent holds the latest token-rate samples (and the in-flight
	// counts they were dispatched at) while a recall is live
	// (recallOnRate).
	recent recentRates
	// round is the limit at the start of the current round of slow start
	// (0 = none): the part grows by ackGain per first token until the
	// window closes (ackGrow). roundN counts the round's first tokens,
	// roundOver those slower than roundMark (the baseline plus the band,
	// seconds); roundQueued: most of them were, and the round grows no
	// further.
	round       float64
	roundN      int
	roundOver   int
	roundBlock  int
	roundMark   float64
	roundQueued bool
	minSamples  int // WindowSamples
	// last is the window before the latest growth step; hold counts the
	// windows left without growth after a step bought nothing.
	last grownFrom
	hold int
	// before is the window before the current one, prev the current one
	// once it is applied (fasterThanBefore).
	before, prev grownFrom
	guarded      uint64
	// queueing: the latest congested window showed the provider queueing
	// (cutLittle); reset by an uncongested window.
	queueing bool
	// run follows the current run of congested windows; calm is the
	// highest limit of the recent uncongested windows (decaying by
	// calmDecay per window), where a rebase returns to.
	run  congestedRun
	calm float64

	// lastChange is when the part last moved. TTFT samples of requests
	// dispatched before it describe the old limit: after a decrease they
	// carry the queueing the decrease answered (counting them again would
	// cut twice for one episode), after an increase they say nothing about
	// the new limit. Only the delay part's own changes count: keyed to
	// the loss part's sawtooth, staleness would starve the delay part (no
	// window would ever close).
	lastChange time.Time
	// eff is the effective limit when the window closed: the part does
	// not grow above it while another part binds lower.
	eff float64
	// refusedAt is the in-flight count at which the provider last
	// refused for lack of capacity when the window closed (0 = none
	// known).
	refusedAt  int
	lastMedian time.Duration
	windows    uint64
	congested  uint64
	rebases    uint64
	resets     uint64
}

func newDelayPart(s settings.Limit) *delayPart {
	p := &delayPart{min: float64(s.Min), max: float64(s.Ceiling), est: float64(s.Initial), minSamples: s.WindowSamples}
	if s.TTFTTarget > 0 {
		p.sp = &setpointLimit{
			estimate:  float64(s.Initial),
			target:    float64(s.TTFTTarget),
			smoothing: s.Smoothing,
			min:       float64(s.Min),
			max:       float64(s.Ceiling),
		}
	}
	return p
}

// value returns the delay limit, always in [min, max].
func (p *delayPart) value() int { return int(p.est) }

// baseline is the TTFT the window median is compared with: the configured
// target, or the learned no-load TTFT (0 before the first window).
func (p *delayPart) baseline() time.Duration {
	if p.sp != nil {
		return time.Duration(p.sp.target)
	}
	if p.ref.empty() {
		return 0
	}
	return time.Duration(p.base * float64(time.Second))
}

// observeRate takes the number of first tokens seen over elapsed (stale
// ones included: every request that got through counts).
func (p *delayPart) observeRate(firstTokens int, elapsed time.Duration) {
	if elapsed <= 0 {
		return
	}
	x := float64(firstTokens) / elapsed.Seconds()
	if p.rate == 0 {
		p.rate = x
		return
	}
	p.rate += 0.3 * (x - p.rate)
}

// congestionSignal tells the part that congestion was seen at the
// effective limit eff (a fresh drop or a slow stream; the part's own
// congested windows too): slow start ends, eff becomes the known capacity
// and probing above it starts again from +1.
func (p *delayPart) congestionSignal(eff float64) {
	if p.known > 0 && eff < p.known && !p.nearRefusal(p.known) {
		// A level within refusalMargin of where the provider refused is
		// the refusal's bound, not a capacity the provider served: it is
		// not remembered (recallOnRate would return to it, into the
		// refusals, as soon as streams decode faster at the lower load).
		switch {
		case p.recall == 0 || p.known >= p.recall || p.clock.Sub(p.recallAt) > recallFor:
			p.recall, p.recallAt = p.known, p.clock
		case p.known >= (1-minTolerance)*p.recall:
			// A fall from the remembered level again: the capacity was
			// there until now, so the memory of it is as old as this
			// fall, not the first one. Counted from the first, a level
			// learned in the cold start's settling expired two minutes
			// later, and a fall after that remembered the low level
			// instead: a capacity that came back 160 s into the run
			// (capacity step) waited 20 s at 20 for growth to find it,
			// where the faster streams would have said so in two.
			p.recallAt = p.clock
		}
		p.recallCalm = false
	}
	p.known, p.streak, p.over = eff, 0, 0
	p.round = 0
}

// onWindow applies one closed window. frozen says growth is stopped by a
// Retry-After.
func (p *delayPart) onWindow(now time.Time, st windowStats, frozen bool, refusedAt int, eff float64) {
	p.eff, p.clock = eff, now
	if st.median <= 0 || st.n == 0 {
		return // unreachable: normaliseTTFT floors at 1 ms
	}
	p.windows++
	p.lastMedian = st.median
	before := p.est
	if p.sp != nil {
		p.sp.OnSample(now.UnixNano(), int64(st.median), st.maxInflight, false)
		p.est = p.sp.estimate
	} else {
		p.learn(st, frozen, refusedAt)
	}
	if math.IsNaN(p.est) || math.IsInf(p.est, 0) || p.est < p.min || p.est > p.max {
		// Unreachable by construction; never let a bad value out.
		p.resets++
		p.est = math.Max(p.min, math.Min(p.max, before))
		if math.IsNaN(p.est) {
			p.est = p.min
		}
	}
	if p.est > before || p.est < math.Min(before, eff) {
		p.lastChange = now
	}
}

// learn is the learned-baseline mode's step. refusedAt is the in-flight
// count at which the provider last refused for lack of capacity (0 =
// none known).
func (p *delayPart) learn(st windowStats, frozen bool, refusedAt int) {
	p.refusedAt = refusedAt
	p.before, p.prev = p.prev, grownFrom{load: st.meanInflight, rate: st.rate, rates: st.rates}
	m := st.median.Seconds()
	first := p.ref.empty()
	if first {
		// The first window (twice the samples of the others) is the
		// reference.
		p.ref.add(refWindow{median: m, absDev: st.absDev, load: st.meanInflight, rate: st.rate, n: st.n})
		p.summarise()
	}
	tol := p.tolerance(st.n)
	congested := m-p.base > tol
	// A window that ran close to where the provider refuses did not see a
	// no-load TTFT: it may lower the baseline but not raise it (a provider
	// that slows down in proportion beyond a knee and refuses at twice the
	// knee would teach the baseline its congested TTFT).
	nearRefusal := refusedAt > 0 && st.meanInflight > refusalMargin*float64(refusedAt)
	if congested && !first && !nearRefusal && p.boughtThroughput(st) {
		// The step bought more throughput than latency: the delay it
		// added is the provider's price for serving more, and the new
		// load its operating point. The baseline moves there, so that
		// the windows at this load are compared with it, not with the
		// TTFT of a lighter load.
		p.ref.reset(refWindow{median: m, absDev: st.absDev, load: st.meanInflight, rate: st.rate, n: st.n})
		p.summarise()
		first, congested = true, false
	}
	if congested {
		p.round = 0
	} else {
		p.run = congestedRun{}
		p.queueing = false
		p.recallCalm = p.recall > 0
		p.calm = math.Max(p.est, p.calm*calmDecay)
		if !first && !st.early {
			// A window closed early is biased low (windowStats.early):
			// taken into the reference, a few of them pull the baseline
			// down until windows at the capacity read congested.
			p.follow(st, tol, nearRefusal)
		}
		p.grow(st, frozen)
		return
	}
	p.congested++
	// A provider that refuses is congested, not slower: near its refusal
	// point the streams slow down with the load it queues, and taking such
	// a window as the new baseline would teach the part a congested TTFT
	// right after a capacity step down, after which congested windows read
	// uncongested and the limit climbs past the new capacity.
	if p.slower(st) && !nearRefusal {
		p.rebase(st)
		return
	}
	if p.run.windows == 0 {
		p.run = congestedRun{median: m, load: st.meanInflight, from: p.calm}
	}
	p.run.windows++
	// A window that Little's law puts at less than one request queued
	// counts half toward forcing a cut (runWindows): a limit hovering at
	// the capacity, one request over it, reads congested by a fraction of
	// a request now and then, and its own cuts of one answer it. Counted
	// in full, three such windows would force a quarter off a limit at
	// its capacity, which then probes back past it. A baseline learned too
	// low still gets its experiment, a few windows later.
	w := 1.0
	if (m-p.base)*p.rate < 1 {
		w = 0.5
	}
	p.run.weight += w
	switch {
	case st.meanInflight <= runCut*p.run.load:
		// The run has taken a quarter of the load away: did the TTFT
		// answer? Congestion does (the queue, or the shared slowdown,
		// shrinks with the load); a provider that got slower, or a
		// baseline learned too low, does not. Two windows in a row must
		// say so: the first requests at the lower load may still queue
		// behind the backlog of the higher one. Never near the provider's
		// refusal point: a provider that refuses is congested.
		if p.run.median-m < runAnswer*(p.run.median-p.base) && !nearRefusal {
			if p.run.unanswered++; p.run.unanswered >= 2 {
				p.rebase(st)
				return
			}
			break
		}
		p.run = congestedRun{median: m, load: st.meanInflight, from: p.run.from, windows: 1, weight: w}
	case p.run.weight >= runWindows:
		// Congested window after window and the cuts have not taken a
		// quarter of the load away: take it, so the next window answers
		// the question above. Or more, down to what the provider serves,
		// when this window and the one before measured it queueing: the
		// windows after a capacity step down come seconds apart (the
		// fresh requests wait behind the backlog for their first token),
		// and a quarter of a load that had already nearly lost one would
		// leave the rest to the next window, seconds later.
		v := runCut * p.run.load
		if served, measured := p.measureServed(st); measured {
			v = math.Min(v, served)
		}
		p.setCut(math.Min(p.est, v))
		return
	}
	p.cutLittle(st)
}

// tolerance is how far above the baseline a median of n samples may be
// before it counts as congestion, in seconds: noiseZ standard errors of the
// difference between the window's median and the baseline, which itself
// stands on baseSamples samples (so the first windows, with a baseline
// from one window, get a wider band).
func (p *delayPart) tolerance(n int) float64 {
	// 1.2533 sigma / sqrt(n) is the standard error of a median.
	se := 1.2533 * p.noise * math.Sqrt(1/float64(n)+1/p.baseSamples)
	return max(minTolerance*p.base, noiseZ*se)
}

// cutLittle answers a congested window: down to the in-flight count the
// window ran at minus the requests queued inside the provider, which by
// Little's law is the excess delay x the rate requests go through.
//
// When the window followed a growth step, the cut goes no lower than the
// limit before the step, which the window before had found uncongested:
// the rate of first tokens, which Little's law needs as the provider's
// service rate, is inflated right after a step (the step's requests were
// all dispatched at once), and it would cut a cold start's slow start
// overshoot far below the capacity. If the capacity fell at
// the same time, the next window cuts further (by at most a quarter
// within one congested run).
//
// When two congested windows in a row show the provider queueing (fewer
// streams past their first token than in flight, by more than a growth
// step), the cut goes to what it serves instead: its capacity, measured
// rather than inferred. Not while whole answers come: they are served
// without a first token, and the controller then reports no count.
func (p *delayPart) cutLittle(st windowStats) {
	queued := (st.median.Seconds() - p.base) * p.rate
	if queued < 1 && (p.known == 0 || appLimitedAt(st.meanInflight, p.eff)) {
		// A delay outside the noise band that Little's law puts at less
		// than one queued request is not a queue yet: it neither ends slow
		// start nor cuts a limit that the load did not use, on average
		// over the window (a noisy
		// window between bursts cut the limit down to the quiet load, and
		// the next burst found it there; a noisy window during the climb
		// after a capacity step up, whose load ran below the limit on
		// average though its peak reached it, cut 40 to 22).
		return
	}
	v := math.Min(p.est, st.meanInflight-queued)
	grown := p.last.est > 0
	// What the provider serves: the streams past their first token when
	// the window's first tokens came, plus those in prefill at no load
	// (Little's law with the baseline). More in flight than that by more
	// than a growth step, two congested windows in a row, is a provider
	// queueing the rest: its capacity is what it serves, measured, where
	// Little's law needs the rate requests go through, which still
	// carries a capacity that just fell (capacity step down to 20: cuts
	// to 15-17, then nothing dispatched for 10 s while in flight drained
	// to the cut; or later windows capped at a quarter of a delay limit
	// far above the limit in effect, so nothing happened for 10 s). One
	// window is not enough: a host stall holds first tokens back the same
	// way, for a window.
	served, measured := p.measureServed(st)
	switch {
	case measured:
		v = math.Min(p.est, served)
	case grown:
		v = math.Max(v, p.last.est)
	case p.queueing && st.refused && served < v:
		// One window showing the provider queueing, and the provider
		// refused meanwhile: a host stall holds first tokens back the
		// same way, but does not make the provider refuse. Halfway to
		// what it serves. The first window after a capacity step down
		// closes seconds after it (its requests wait for in flight to
		// drain to the loss part's cut, then behind the backlog), and
		// Little's law on its median underestimates the queue the count
		// shows; the next window, the one that measures, comes as late
		// again. All the way to the count would overshoot the other way.
		v = (v + served) / 2
	}
	if p.run.windows > 1 && !measured {
		// Unless measured, a later window of the same congested run cuts
		// by at most a quarter: its requests were dispatched after the
		// last cut, yet they still queue behind the backlog the higher
		// load left, and Little's law, with the service rate of before
		// the congestion, would read that backlog as a queue at the new
		// limit and cut below the capacity, to climb back from there.
		v = math.Max(v, runCut*p.est)
	}
	known := p.known
	p.setCut(v)
	if appLimited(st, p.eff) && !grown && !p.nearRefusal(known) {
		// The load ran well below the limit: the limit did not cause the
		// delay, and what caused it (a capacity that fell below the load,
		// or latency that has nothing to do with load, such as a stalled
		// host) says nothing about where the limit was. The cut protects
		// the provider now; the capacity estimate stays, so that demand
		// returns to it by slow start rather than probing up from the cut.
		// Not an estimate within refusalMargin of where the provider
		// refused: that is the refusal's bound, not a capacity (a
		// provider that queues beyond its capacity and refuses at one
		// and a half times it), and slow start back to it ran into the
		// refusals again, window after window.
		p.known = known
	}
}

// nearRefusal reports whether a limit of v is within refusalMargin of
// the in-flight count at which the provider last refused.
func (p *delayPart) nearRefusal(v float64) bool {
	return p.refusedAt > 0 && v > refusalMargin*float64(p.refusedAt)
}

// measureServed returns what the provider served in the congested window
// st (the streams past their first token when its first tokens came, plus
// those in prefill at no load) and whether this window and the congested
// one before it both showed it queueing the rest: more in flight than it
// serves by more than a growth step (cutLittle).
func (p *delayPart) measureServed(st windowStats) (served float64, measured bool) {
	served = math.Ceil(st.decoding + p.rate*p.base)
	queueing := st.decoding > 0 && st.meanInflight-served > math.Max(1, math.Sqrt(st.meanInflight))
	measured = queueing && p.queueing
	p.queueing = queueing
	return served, measured
}

// appLimited reports whether the window st ran with its load well below
// the limit eff: its highest in-flight count more than sqrt(eff) below it.
func appLimited(st windowStats, eff float64) bool {
	return appLimitedAt(float64(st.maxInflight), eff)
}

// appLimitedAt reports whether an in-flight count is more than sqrt(eff)
// below the limit eff.
func appLimitedAt(inflight, eff float64) bool {
	return inflight < eff-math.Max(1, math.Sqrt(eff))
}

// setCut lowers the part to v, at most by maxCut and not below min, and
// remembers the limit it cut from (over).
func (p *delayPart) setCut(v float64) {
	from := math.Min(p.est, p.eff)
	p.est = math.Min(p.est, math.Max(math.Max(v, p.est*maxCut), p.min))
	p.congestionSignal(p.est)
	p.over = math.Max(from, p.est)
	p.last = grownFrom{}
}
