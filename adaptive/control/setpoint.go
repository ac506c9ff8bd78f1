package control

import (
	"math"

	"github.com/platinummonkey/go-concurrency-limits/core"
)

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
// target exists to avoid (learned baselines drift when a provider slows
// gradually). Unlike Gradient2 there is no queue allowance
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
