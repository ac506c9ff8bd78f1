package adaptive

import (
	"math"
	"time"

	"github.com/platinummonkey/go-concurrency-limits/core"
	"github.com/platinummonkey/go-concurrency-limits/limit"
)

// gradientQueueSize is the growth allowance of the delay part at a given
// limit: max(2, sqrt(limit)), the recipe of design.md §2. With the library's
// default (a constant 4) the limit grows as fast at 5 as at 500.
func gradientQueueSize(limit int) int {
	return max(2, int(math.Sqrt(float64(limit))))
}

// delayPart is the delay-based part of a gradient2 controller. It is fed
// one sample per closed delayWindow (the median prompt-normalised TTFT and
// the window's maximum in-flight), never per request.
//
// Two modes:
//
//   - Learned baseline (TTFTTarget == 0): the library's Gradient2Limit.
//     gradient = clamp(long-term average / window median, 0.5, 1); the
//     limit moves to limit*gradient + sqrt(limit), smoothed.
//   - Set-point (TTFTTarget > 0): setpointLimit below, the same formula
//     with the long-term average replaced by the target. See its comment.
//
// Guards around the library (design.md §2): the median is floored at 1 ms
// before it gets here (rtt <= 0 poisons Gradient2 with NaN forever), and
// after every sample the estimate is checked; an estimate outside
// [Min, Ceiling] (int(NaN) lands there) replaces the library state by a
// fresh limit at the last good value and counts a reset.
//
// Not safe for concurrent use: the controller's mutex guards it.
type delayPart struct {
	lib    core.Limit
	newLib func(initial int) core.Limit // builds lib; replaced in tests
	min    int
	max    int
	last   int // last in-range estimate; what value() reports

	target     time.Duration // > 0: set-point mode
	long       longRTTMirror // learned mode: mirror of the library's baseline, for State
	lastMedian time.Duration
	// lastDecrease is when the part last went down. TTFT samples of requests
	// dispatched before it are stale: they carry the queueing the decrease
	// answered, and counting them again would cut twice for one episode.
	// Only the delay part's own decreases count. Keying staleness to every
	// decrease of the effective limit starved the delay part in the
	// simulation: the loss part's sawtooth (a cut or hold every 2-3 s while
	// 429s came in at 1.5 C) made every sample stale, no window ever closed,
	// and the limit stayed at about 1.4 C for the whole C = 20 phase.
	lastDecrease time.Time
	windows      uint64
	resets       uint64
}

func newDelayPart(s Settings) *delayPart {
	p := &delayPart{min: s.Min, max: s.Ceiling, target: s.TTFTTarget, long: longRTTMirror{window: s.LongWindow}}
	if s.TTFTTarget > 0 {
		p.newLib = func(initial int) core.Limit {
			return &setpointLimit{
				estimate:  float64(initial),
				target:    float64(s.TTFTTarget),
				smoothing: s.Smoothing,
				min:       float64(s.Min),
				max:       float64(s.Ceiling),
			}
		}
	} else {
		p.newLib = func(initial int) core.Limit {
			// Parameters were validated, so the library's silent
			// replacements never apply. No registry, no logger, no
			// listeners (they run under the library's mutex).
			l, err := limit.NewGradient2Limit("sluice-delay", initial, s.Ceiling, s.Min,
				gradientQueueSize, s.Smoothing, s.LongWindow, nil, nil)
			if err != nil {
				panic("adaptive: gradient2 rejected validated settings: " + err.Error())
			}
			return l
		}
	}
	p.lib = p.newLib(s.Initial)
	p.last = s.Initial
	return p
}

// value returns the delay limit, always in [min, max].
func (p *delayPart) value() int { return p.last }

// baseline is the TTFT the window median is compared with: the configured
// target, or the learned long-term average.
func (p *delayPart) baseline() time.Duration {
	if p.target > 0 {
		return p.target
	}
	return time.Duration(p.long.value)
}

// onWindow feeds one closed window: its median normalised TTFT and the
// maximum in-flight count seen at dispatch.
func (p *delayPart) onWindow(now time.Time, median time.Duration, maxInflight int) {
	if median <= 0 {
		return // unreachable: normaliseTTFT floors at 1 ms; never feed rtt <= 0
	}
	p.lib.OnSample(now.UnixNano(), int64(median), maxInflight, false)
	p.windows++
	p.lastMedian = median
	if p.target == 0 {
		p.long.add(float64(median))
	}
	if v := p.lib.EstimatedLimit(); v >= p.min && v <= p.max {
		if v < p.last {
			p.lastDecrease = now
		}
		p.last = v
		return
	}
	// Non-finite or out of range: start again from the last good value.
	p.resets++
	p.lib = p.newLib(p.last)
	p.long = longRTTMirror{window: p.long.window}
}

// longRTTMirror recomputes the library's long-term RTT (an exponential
// average over window samples after a 10-sample warm-up, cut by 10% when it
// exceeds twice the latest sample) because Gradient2Limit does not expose
// it. It is reporting only (State.TTFTBaseline) and never steers the limit.
type longRTTMirror struct {
	window int
	count  int
	sum    float64
	value  float64
}

func (m *longRTTMirror) add(rtt float64) {
	const warmup = 10 // NewGradient2Limit's warm-up for the long average
	if m.count < warmup {
		m.count++
		m.sum += rtt
		m.value = m.sum / float64(m.count)
	} else {
		f := 2 / float64(m.window+1)
		m.value = m.value*(1-f) + rtt*f
	}
	if m.value/rtt > 2 {
		m.value *= 0.9
	}
}

// setpointLimit is the delay part with a configured TTFT target. It keeps
// Gradient2's shape (gradient clamped to [0.5, 1], sqrt growth allowance,
// the same smoothing, no change while app-limited) but compares the window
// median with the fixed target instead of a learned long-term average:
//
//	median <= target: limit += sqrt(limit)      (room: grow)
//	median >  target: limit *= max(0.5, target/median)   (shrink in proportion)
//	then limit = old*(1-smoothing) + new*smoothing, clamped to [Min, Ceiling]
//
// so the window median is held around the target. Why not feed the library
// scaled samples: its long-term average would still move with every sample
// (and its 2x reset would cut it), which is exactly the drift a configured
// target exists to avoid (design.md §2: learned baselines drift when a
// provider slows gradually). Unlike Gradient2 there is no queue allowance
// when above the target, so median == target is the neutral point rather
// than target*limit/(limit-sqrt(limit)). The target is compared with the
// prompt-normalised TTFT; a target below the provider's no-load TTFT drives
// the limit to Min.
//
// Not safe for concurrent use: the controller's mutex guards it. It never
// notifies listeners.
type setpointLimit struct {
	estimate  float64
	target    float64 // ns
	smoothing float64
	min, max  float64
}

var _ core.Limit = (*setpointLimit)(nil)

// EstimatedLimit returns the current limit.
func (l *setpointLimit) EstimatedLimit() int { return int(l.estimate) }

// NotifyOnChange is not supported: listeners are never called.
func (l *setpointLimit) NotifyOnChange(core.LimitChangeListener) {}

// OnSample applies one window: rtt is its median in ns, inFlight its max.
func (l *setpointLimit) OnSample(_ int64, rtt int64, inFlight int, _ bool) {
	if rtt <= 0 || float64(inFlight) < l.estimate/2 {
		return // invalid, or app-limited: the window says nothing about capacity
	}
	var next float64
	if g := l.target / float64(rtt); g >= 1 {
		next = l.estimate + float64(gradientQueueSize(int(l.estimate)))
	} else {
		next = l.estimate * math.Max(0.5, g)
	}
	next = l.estimate*(1-l.smoothing) + next*l.smoothing
	l.estimate = math.Max(l.min, math.Min(l.max, next))
}
