package adaptive

import (
	"time"

	"github.com/platinummonkey/go-concurrency-limits/limit"
)

// lossPart is the loss-based part of a controller: the library's AIMDLimit
// (+1 on a success while the limit is in use, times Backoff on a drop), with
// what the library lacks added around it:
//
//   - bounds: AIMDLimit has no min or max, so after every sample the value
//     is clamped to [Min, Ceiling] by re-creating the library limit at the
//     bound (its whole state is one int, so re-creating loses nothing);
//   - a cool-down: at most one cut per Cooldown, so a burst of 429s is one
//     congestion event, not one cut per 429;
//   - staleness: a drop of a request dispatched before the last cut is not
//     cut again, it reports congestion the cut already answered;
//   - a hold inside the cool-down: a fresh drop (dispatched after the last
//     cut, at n in flight) that cannot cut yet lowers the part to n-1 if it
//     is above that. The refused request's permit is not handed to the
//     next waiter, so a refusal is never replaced by another request. It
//     is -1 per fresh refusal, never multiplicative, and starts no
//     cool-down; stale drops (the usual burst) never hold. Without it,
//     every drop frees a permit, the next waiter takes it and draws the
//     next drop, draining the wait queue into 429s within one cool-down.
//     Measured in TestSimCapacity (429s per run): gradient2 7 with the
//     hold, 57 with holds bounded to one more Backoff step per cool-down,
//     488 without; aimd 68 / 112 / 1868;
//   - Retry-After: the controller pins the part and stops feeding successes
//     until the deadline (controller.go).
//
// Not safe for concurrent use: the controller's mutex guards it.
type lossPart struct {
	lib      *limit.AIMDLimit
	cur      int // lib's estimate, cached: reading it takes the library's lock
	min, max int
	backoff  float64
	cooldown time.Duration
	lastCut  time.Time
}

func newLossPart(s Settings) lossPart {
	p := lossPart{min: s.Min, max: s.Ceiling, backoff: s.Backoff, cooldown: s.Cooldown}
	p.set(s.Initial)
	return p
}

// value returns the current loss limit, always in [min, max].
func (p *lossPart) value() int { return p.cur }

// set replaces the library limit by a fresh one at v clamped to [min, max].
// It is called only on clamps, pins and holds, never per success.
func (p *lossPart) set(v int) {
	v = max(p.min, min(p.max, v))
	// No registry, no listeners: the library's NotifyOnChange callbacks run
	// under its mutex (design.md §2), and nothing here needs one.
	p.lib = limit.NewAIMDLimit("sluice-loss", v, p.backoff, 1, nil)
	p.cur = v
}

// success reports a served request that was dispatched with inflight
// permits in use. The library grows the limit by one only when inflight
// reached it, so the part stays just above a limit that another part binds.
func (p *lossPart) success(inflight int) {
	if p.value() >= p.max {
		return // growth would only be clamped back
	}
	p.lib.OnSample(0, 1, inflight, false)
	p.cur = p.lib.EstimatedLimit()
	if p.cur > p.max {
		p.set(p.max)
	}
}

// pin lowers the part to at most v (the effective limit), so it cannot let
// the effective limit grow. Not a cut: no cool-down starts.
func (p *lossPart) pin(v int) {
	if p.value() > v {
		p.set(v)
	}
}

// drop reports a congestion signal at now for request s while the
// effective limit is eff. A cut starts from min(part, eff): when another
// part binds lower, cutting the loss part's unused headroom would change
// nothing. It returns whether the part was cut.
func (p *lossPart) drop(now time.Time, s Sample, eff int) bool {
	if !p.lastCut.IsZero() {
		if s.Dispatched.Before(p.lastCut) {
			return false // stale: dispatched before the last cut
		}
		if now.Sub(p.lastCut) < p.cooldown {
			// Cooling down: no cut, but hold below the concurrency that drew
			// this drop.
			if s.InflightAtDispatch > 0 {
				p.pin(s.InflightAtDispatch - 1)
			}
			return false
		}
	}
	p.pin(eff)
	p.lib.OnSample(0, 1, s.InflightAtDispatch, true)
	p.cur = p.lib.EstimatedLimit()
	if p.cur < p.min {
		p.set(p.min)
	}
	p.lastCut = now
	return true
}
