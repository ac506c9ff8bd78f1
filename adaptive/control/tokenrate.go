package control

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// ratePart is the token-rate part: a decode-bound provider slows every
// stream as concurrency grows while TTFT stays flat and nothing is refused,
// so neither the delay nor the loss part sees it. A configured floor
// (MinTokenRate, output tokens/s per stream) turns slow streams into a
// congestion signal:
//
//   - a sample below the floor cuts the part to min(part, effective limit)
//     x rate/floor (the share of streams the provider can run at the floor
//     if every stream's rate falls in proportion to the load), at most by
//     Backoff and at most once per Cooldown. A stream just under the floor
//     is a small cut: a fixed Backoff cut would make the limit saw below
//     where streams meet the floor;
//   - a sample at or above the floor grows it by 1/part (about +1 per
//     limit's worth of samples, the congestion-avoidance pace of TCP: a
//     stream reports its rate every 32 output tokens, so faster growth
//     overshoots before the first slow stream reports).
//
// There is no staleness filter: a stream reports its rate at or near its
// end, often a whole stream length after dispatch, so skipping streams
// dispatched before the last cut would delay every step by that long. The
// cool-down and the cut being relative to the effective limit (not to the
// concurrency the stream saw) bound the overshoot instead.
//
// The part only ever lowers the limit: it is capped at min(delay, loss), and
// once it grows past that cap it is inactive (not binding) until the next
// slow sample. That matters because a buffering hop between Sluice and the
// provider makes inter-token latency look fast while TTFT grows; the rate
// signal must never hold a limit up against the others.
//
// Not safe for concurrent use: the controller's mutex guards it.
type ratePart struct {
	floor    float64
	backoff  float64
	cooldown time.Duration
	min      float64
	v        float64 // +Inf while inactive
	lastCut  time.Time
}

func newRatePart(s settings.Limit) *ratePart {
	return &ratePart{
		floor:    s.MinTokenRate,
		backoff:  s.Backoff,
		cooldown: s.Cooldown,
		min:      float64(s.Min),
		v:        math.Inf(1),
	}
}

// value returns the part and whether it is active.
func (p *ratePart) value() (float64, bool) { return p.v, !math.IsInf(p.v, 1) }

// capAt deactivates the part once it has grown above the other parts'
// minimum. At equal value it stays active, so that when a cut took every
// part to the same value (say Min), a success growing the loss part does
// not lift the limit past the slow streams.
func (p *ratePart) capAt(others float64) {
	if p.v > others {
		p.v = math.Inf(1)
	}
}

// observe takes one token-rate sample (finite, >= 0) at now while the
// effective limit is eff; frozen says growth is stopped by Retry-After. It
// returns whether the sample cut the part.
func (p *ratePart) observe(now time.Time, rate float64, eff int, frozen bool) bool {
	if rate < p.floor {
		if !p.lastCut.IsZero() && now.Sub(p.lastCut) < p.cooldown {
			return false
		}
		p.v = math.Max(p.min, math.Min(p.v, float64(eff))*math.Max(p.backoff, rate/p.floor))
		p.lastCut = now
		return true
	}
	if _, active := p.value(); active && !frozen {
		p.v += 1 / p.v
	}
	return false
}
