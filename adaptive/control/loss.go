package control

import (
	"time"

	"github.com/platinummonkey/go-concurrency-limits/limit"

	"github.com/sluicehq/sluice/settings"
)

// lossPart is the loss-based part of a controller: the library's AIMDLimit
// (+1 on a success while the limit is in use), with what the library lacks
// added around it:
//
//   - bounds: AIMDLimit has no min or max, so the value is clamped to
//     [Min, Ceiling] by re-creating the library limit at the bound (its
//     whole state is one int, so re-creating loses nothing);
//   - a refusal says where the capacity is: the provider refused a request
//     dispatched with n in flight, so n-1 is an upper bound on what it
//     accepts now. A fresh refusal (dispatched after the last cut) cuts to
//     n-1, not by a blind Backoff factor that lands anywhere below it; only
//     a refusal whose in-flight count is unknown cuts by Backoff;
//   - probing above that bound slowly: one step per cool-down instead of
//     one per success, so a provider with a hard concurrency cap refuses
//     at most one probe per cool-down. The bound is forgotten after
//     boundMemory cool-downs without a refusal (the capacity may have
//     grown);
//   - refusals that are not about concurrency: when the provider accepts a
//     request dispatched with more in flight than a bound it set by
//     refusing before (a request-rate limit refuses at any concurrency,
//     first during a cold start's burst), refusals say nothing about the
//     limit for boundMemory cool-downs: each one holds its own permit back
//     until the provider's Retry-After has passed and then gives it back,
//     with no cut, the permits held spread over a Retry-After
//     (heldPermits). Cutting to n-1 each time would hold a provider with
//     a request-rate limit far below what it serves;
//   - a cool-down: at most one cut per Cooldown, so a burst of 429s is one
//     congestion event, not one cut per 429;
//   - staleness: a drop of a request dispatched before the last cut is not
//     cut again, it reports congestion the cut already answered;
//   - a hold inside the cool-down: a fresh drop (dispatched after the last
//     cut, at n in flight) that cannot cut yet lowers the part to n-1 if it
//     is above that. The refused request's permit is not handed to the
//     next waiter, so a refusal is never replaced by another request.
//     Without it, every drop frees a permit, the next waiter takes it and
//     draws the next drop, draining the wait queue into 429s within one
//     cool-down;
//   - Retry-After: the controller pins the part, stops feeding successes
//     and gives no held permit back until the deadline (controller.go);
//   - a capacity that came back: when the delay part returns to the
//     capacity it knew before a fall (its streams decode faster again),
//     refusals older than boundMemory cool-downs were the fall's, and the
//     part rises to that level at once (lift) instead of by one request
//     per first token.
//
// With a delay part (gradient2) the part starts at the ceiling: until the
// first refusal it has nothing to say, and growth is the delay part's.
//
// Not safe for concurrent use: the controller's mutex guards it.
type lossPart struct {
	lib      *limit.AIMDLimit
	cur      int // lib's estimate, cached: reading it takes the library's lock
	min, max int
	backoff  float64
	cooldown time.Duration
	lastCut  time.Time
	// bound is n-1 for the last fresh refusal at n in flight (0 = none);
	// boundAt is when it was learned, probedAt when the part last grew
	// above it.
	bound    int
	boundAt  time.Time
	probedAt time.Time
	// notConcurrency is when a bound was last contradicted (see served);
	// held is the ring of deadlines of the permits held back since, one
	// per permit, so they come back one by one as they were taken and not
	// as a burst (which a request-rate limit would refuse again).
	notConcurrency time.Time
	held           heldPermits
}

// heldPermits is a FIFO of the times held permits are due back. Fixed
// size, so holding never allocates; when full, a new hold extends the
// newest deadline instead of adding one.
//
// Permits come back one per gap at most, so those that came due together
// are given back spread over a Retry-After: a refusal holds several at
// once, and a freeze keeps every one due in it back until it ends, and
// given back at once they would be a burst of dispatches that the
// request-rate limit refuses again, a second later, every second. The gap
// runs from the last permit
// given back, on the controller's samples, so with sparse samples (little
// traffic, little to burst) they come back one per sample. Scheduling
// each at its deadline plus a gap after the one before would give them all
// back at the end of a freeze again.
type heldPermits struct {
	due        [32]time.Time
	head, size int
	gap        time.Duration // between two permits given back
	next       time.Time     // no permit back before
}

// push holds one more permit until t; gap is the spacing of permits given
// back from now on.
func (h *heldPermits) push(t time.Time, gap time.Duration) {
	h.gap = gap
	if h.size == len(h.due) {
		last := &h.due[(h.head+h.size-1)%len(h.due)]
		*last = later(*last, t)
		return
	}
	h.due[(h.head+h.size)%len(h.due)] = t
	h.size++
}

// popDue removes and counts the deadlines at or before now, at most one
// per gap.
func (h *heldPermits) popDue(now time.Time) int {
	n := 0
	for h.size > 0 && !now.Before(h.due[h.head]) && !now.Before(h.next) {
		h.head = (h.head + 1) % len(h.due)
		h.size--
		n++
		h.next = now.Add(h.gap)
	}
	return n
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// boundMemory is how many cool-downs a refusal's bound is kept without a
// new refusal. Refusals are rare once the limit is below the bound, so
// silence alone cannot confirm it; after this long the capacity may have
// grown and the part grows at its normal pace again.
const boundMemory = 10

func newLossPart(s settings.Limit) lossPart {
	p := lossPart{min: s.Min, max: s.Ceiling, backoff: s.Backoff, cooldown: s.Cooldown}
	p.set(s.Initial)
	return p
}

// value returns the current loss limit, always in [min, max].
func (p *lossPart) value() int { return p.cur }

// set replaces the library limit by a fresh one at v clamped to [min, max].
// It is called on clamps, pins, cuts, holds and probes, never for an
// ordinary success.
func (p *lossPart) set(v int) {
	v = max(p.min, min(p.max, v))
	// No registry, no listeners: the library's NotifyOnChange callbacks run
	// under its mutex, and nothing here needs one.
	p.lib = limit.NewAIMDLimit("sluice-loss", v, p.backoff, 1, nil)
	p.cur = v
}

// served reports that the provider is serving a request dispatched at
// dispatched with inflight permits in use (its first token, its whole
// answer, or a token-rate sample mid-stream); now is the controller's
// clock. success says the request just got its first token or answer:
// only those grow the part by +1 (AIMD), and only when inflight reached
// it, so it stays just above a limit that another part binds. Probing
// above a refusal's bound is paced by time, so any served sample may take
// the step.
func (p *lossPart) served(now, dispatched time.Time, inflight int, success bool) {
	if p.bound > 0 && inflight > p.bound && !dispatched.Before(p.boundAt) {
		// The provider accepted a request dispatched with more in flight
		// than a refusal it sent before: that refusal was not about
		// concurrency (a request-rate limit refuses at any concurrency).
		p.notConcurrency, p.bound = now, 0
	}
	if p.bound > 0 && now.Sub(p.boundAt) > boundMemory*p.cooldown {
		p.bound = 0 // old: the capacity may have grown since
	}
	if p.value() >= p.max || inflight < p.cur {
		return // growth would only be clamped back, or the limit is not in use
	}
	if p.bound > 0 && p.cur >= p.bound && !p.rateLike(now) {
		if now.Sub(p.probedAt) >= p.cooldown {
			p.probedAt = now
			p.set(p.cur + 1)
		}
		return
	}
	if !success {
		return
	}
	p.lib.OnSample(0, 1, inflight, false)
	p.cur = p.lib.EstimatedLimit()
	if p.cur > p.max {
		p.set(p.max)
	}
}

// refusedAt returns the in-flight count at which the provider last refused
// for lack of capacity (the bound + 1), or 0 when there is no such bound
// or refusals were shown not to be about concurrency.
func (p *lossPart) refusedAt(now time.Time) int {
	if p.bound == 0 || p.rateLike(now) {
		return 0
	}
	return p.bound + 1
}

// rateLike reports whether refusals were recently shown not to be about
// concurrency.
func (p *lossPart) rateLike(now time.Time) bool {
	return !p.notConcurrency.IsZero() && now.Sub(p.notConcurrency) < boundMemory*p.cooldown
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
// nothing. It returns whether the drop said the concurrency was too high
// (a cut or a hold below the concurrency that drew it): stale drops report
// congestion that was already answered, and a refusal that is not about
// concurrency says nothing about the limit.
func (p *lossPart) drop(now time.Time, s Sample, eff int) bool {
	n := s.InflightAtDispatch
	if !p.lastCut.IsZero() && s.Dispatched.Before(p.lastCut) {
		return false // stale: dispatched before the last cut
	}
	if n > 0 {
		p.bound, p.boundAt = max(1, n-1), now
	}
	switch {
	case n > 0 && p.rateLike(now):
		// Not about concurrency: hold the refused request's permit back
		// until the provider's Retry-After (a cool-down when it gave
		// none), then give it back. No cut, no cool-down.
		hold := s.RetryAfter
		if hold <= 0 {
			hold = p.cooldown
		}
		if to := max(p.min, n-1); p.cur > to {
			k := p.cur - to
			gap := hold / time.Duration(min(p.held.size+k, len(p.held.due)))
			for range k {
				p.held.push(now.Add(hold), gap)
			}
			p.set(to)
		}
		return false
	case !p.lastCut.IsZero() && now.Sub(p.lastCut) < p.cooldown:
		// Cooling down: no cut, but hold below the concurrency that drew
		// this drop.
		if n > 0 {
			p.pin(n - 1)
		}
		return true
	}
	p.pin(eff)
	if n > 0 {
		p.pin(n - 1) // the cut: to the concurrency the provider refused
	} else {
		p.lib.OnSample(0, 1, 0, true)
		p.cur = p.lib.EstimatedLimit()
		if p.cur < p.min {
			p.set(p.min)
		}
	}
	p.probedAt = now
	p.lastCut = now
	return true
}

// lift raises the part to v (at most the ceiling) when the provider has
// refused nothing for boundMemory cool-downs (lastDrop: the controller's
// latest drop, zero for none) and its refusals were not
// shown to be about something other than concurrency: the caller has seen
// the capacity come back to v, and what the part learned from refusals
// before that described the capacity that fell.
//
// Without it, the part would hold the limit where the fall's refusals had
// left it and grow by one request per first token once it bound: seconds
// of a limit under the capacity after it came back, the more so the
// larger the capacity.
func (p *lossPart) lift(now, lastDrop time.Time, v int) {
	if p.cur >= v || p.rateLike(now) || !lastDrop.IsZero() && now.Sub(lastDrop) <= boundMemory*p.cooldown {
		return
	}
	p.set(v)
	p.bound = 0
}

// restore gives back the permits held for refusals that were not about
// concurrency once their Retry-After has passed.
func (p *lossPart) restore(now time.Time) {
	if k := p.held.popDue(now); k > 0 {
		p.set(p.cur + k)
	}
}
