package adaptive

import (
	"math"
	"time"
)

// PickResult is Pick's answer.
type PickResult struct {
	// OK: the attempt holds an upstream.
	OK bool
	// RetryAfter (when not OK) is how long until an upstream's breaker lets
	// a probe through: the proxy answers 503 with it as Retry-After.
	RetryAfter time.Duration
}

// Pick chooses the upstream for the next attempt of the request holding
// res (its rate reservation; nil when the provider has no rate layer) and
// p (its provider permit, nil in tests), and makes a hold it. avoid is the
// upstream the previous attempt failed on (nil for a first attempt): it is
// skipped when another upstream is usable, and always when strict (the
// retry must go elsewhere, RetryDecision.Elsewhere).
//
// An upstream is usable when its breaker lets the attempt through (closed,
// or half-open with a probe free). Among usable upstreams, in order:
//
//  1. the upstream the rate reservation is bound to, if it is below its
//     limit: the reservation's claim on its quota becomes the attempt's;
//  2. the usable upstream below its limit with the highest score whose
//     quota can take the request at once (the bound upstream's claim, if
//     any, is given back);
//  3. the bound upstream even above its limit (its limit is a soft target:
//     the provider's limit, the sum of its upstreams', let the request in);
//  4. the usable upstream with the highest score, its quota charged even
//     if it goes into debt: the request has waited its turn already.
//
// The score ranks upstreams by load relative to their limits, divided by
// their weights: the load is the larger of the share of its limit in
// flight (in flight / limit) and the spent share of its quota's most
// spent dimension (1 - level / capacity). The least loaded wins: with
// equal weights the one with the most headroom relative to its limit;
// with weights 3 and 1 and equal limits, traffic splits 3:1. An
// upstream's own ceiling is a hard cap in every step.
//
// With one upstream there is nothing to choose: it takes the attempt, up
// to its own ceiling, when its breaker lets it through (its limit is the
// provider's, which the permit already enforces).
//
// When no upstream is usable, Pick reports when the first breaker lets a
// probe through. Pick does not allocate.
func (s *UpstreamSet) Pick(now time.Time, res *Reservation, p *Permit, avoid *Upstream, strict bool, a *Attempt) PickResult {
	if a.state.Load() == permitHeld {
		panic("adaptive: attempt picked while still held")
	}
	ups := s.Upstreams()
	cost := Demand{}.costs() // one request, no tokens: without a reservation
	number := 1
	if res != nil {
		cost, number = res.cost, res.attempts+1
		a.key = res.key
	}
	if len(ups) == 1 {
		// One upstream: nothing to choose. It takes the attempt up to its
		// own ceiling (its limit is the provider's) if its breaker lets it.
		if u := ups[0]; (u != avoid || !strict) && s.grab(now, u, u.hard(), cost, math.MaxInt64, res, a) {
			return s.picked(now, res, p, a, number, u, avoid)
		}
		return PickResult{RetryAfter: s.reopensIn(now, ups)}
	}
	var bound *Upstream
	if res != nil {
		for _, u := range ups { // still configured (a reload may have dropped it)
			if u == res.bound {
				bound = u
			}
		}
	}
	if avoid != nil && !strict && !s.HasAlternative(now, avoid) {
		avoid = nil // the failed upstream is the only one left
	}
	usable := func(u *Upstream) bool { return u != avoid && u.brk.Available(now) }
	hard := (*Upstream).hard

	// 1. The bound upstream, below its limit.
	if bound != nil && usable(bound) && s.grab(now, bound, bound.limit(), cost, 0, res, a) {
		return s.picked(now, res, p, a, number, bound, avoid)
	}
	// 2. The best-scored upstream below its limit that can take the request
	// at once.
	var tried uint64
	for {
		u := s.best(now, ups, a, usable, &tried, true)
		if u == nil {
			break
		}
		if u == bound {
			continue // tried in step 1
		}
		if s.grab(now, u, u.limit(), cost, 0, res, a) {
			return s.picked(now, res, p, a, number, u, avoid)
		}
	}
	// 3. The bound upstream, above its limit.
	if bound != nil && usable(bound) && s.grab(now, bound, hard(bound), cost, math.MaxInt64, res, a) {
		return s.picked(now, res, p, a, number, bound, avoid)
	}
	// 4. The best-scored upstream, charged regardless.
	tried = 0
	for {
		u := s.best(now, ups, a, usable, &tried, false)
		if u == nil {
			break
		}
		if s.grab(now, u, hard(u), cost, math.MaxInt64, res, a) {
			return s.picked(now, res, p, a, number, u, avoid)
		}
	}
	return PickResult{RetryAfter: s.reopensIn(now, ups)}
}

// best returns the usable upstream with the highest score not yet in
// tried (and marks it tried); belowLimit keeps only those under their
// limit. nil when none is left.
func (s *UpstreamSet) best(now time.Time, ups []*Upstream, a *Attempt, usable func(*Upstream) bool, tried *uint64, belowLimit bool) *Upstream {
	var best *Upstream
	bestScore, bestIndex := math.Inf(-1), 0
	for i, u := range ups {
		if *tried&(1<<i) != 0 || !usable(u) {
			continue
		}
		lim, n := u.limit(), u.inflight.Load()
		if belowLimit && n >= lim {
			continue
		}
		if sc := score(now, u, a.key, lim, n); sc > bestScore {
			best, bestScore, bestIndex = u, sc, i
		}
	}
	if best != nil {
		*tried |= 1 << bestIndex
	}
	return best
}

// score is minus an upstream's load relative to its limit (or the spent
// share of its quota for key, when larger), divided by its weight: higher
// is better.
func score(now time.Time, u *Upstream, key QuotaKey, lim, inflight int64) float64 {
	load := max(float64(inflight)/float64(lim), u.spent(now, key))
	return -load / float64(u.set.Load().Weight)
}

// grab gives a a slot on u (below cap), a pass through its breaker and a
// claim on its quota: the reservation's, when it holds one on u, else a
// new one of cost, reserved within maxWait without waiting (a reservation
// that would need a wait fails, except with maxWait math.MaxInt64, which
// charges regardless; a request larger than the quota's capacity goes
// unclaimed).
func (s *UpstreamSet) grab(now time.Time, u *Upstream, cap int64, cost costs, maxWait time.Duration, res *Reservation, a *Attempt) bool {
	move := res != nil && res.bound == u && res.up.state != claimNone
	var c claim
	var mq *modelQuota
	// A request without a reservation (the proxy skips the rate layer when
	// Rates.Needed says nothing limits it) takes no claim on an off quota.
	if t := u.accts.Load(); !move && (res != nil || t.on()) {
		if mq = t.acquire(now, a.key); mq != nil {
			if _, ok, tooLarge := mq.q.reserve(now, &c, cost, maxWait); !ok && !tooLarge {
				mq.release()
				return false
			}
		}
	}
	n, ok := u.tryInc(cap)
	if ok {
		var t Ticket
		if t, ok = u.brk.Allow(now); ok {
			a.up, a.ticket, a.inflight = u, t, int(n)
		} else {
			u.inflight.Add(-1)
		}
	}
	switch {
	case !ok:
		if mq != nil {
			mq.q.settle(now, &c, Usage{})
			mq.release()
		}
	case move:
		a.claim, res.up = res.up, claim{}
		a.mq, res.upq = res.upq, nil
	default:
		a.claim, a.mq = c, mq
	}
	return ok
}

// hard is u's hard cap on attempts in flight: its own ceiling, if any.
func (u *Upstream) hard() int64 {
	if c := u.set.Load().Ceiling; c > 0 {
		return int64(c)
	}
	return math.MaxInt64
}

// tryInc takes an in-flight slot on u if it has fewer than cap.
func (u *Upstream) tryInc(cap int64) (int64, bool) {
	for {
		n := u.inflight.Load()
		if n >= cap {
			return 0, false
		}
		if u.inflight.CompareAndSwap(n, n+1) {
			return n + 1, true
		}
	}
}

// picked completes a pick of u: the reservation's claim on another
// upstream is given back, the attempt is marked sent on its quota and
// held.
func (s *UpstreamSet) picked(now time.Time, res *Reservation, p *Permit, a *Attempt, number int, u *Upstream, avoid *Upstream) PickResult {
	failover := avoid != nil && u != avoid
	if res != nil {
		if b := res.bound; b != nil && b != u {
			res.settleUp(now)
			failover = failover || !b.brk.Available(now)
		}
		res.bound = u
		res.attempts = number
	}
	if failover {
		u.failovers.Add(1)
	}
	if mq := a.mq; mq != nil {
		mq.q.sendClaim(now, &a.claim)
	}
	a.set, a.permit, a.start, a.number, a.failover = s, p, now, number, failover
	a.shared = s.shared.Load()
	if a.flags.Load() != 0 { // a load, not a store, when there is nothing to clear
		a.flags.Store(0)
	}
	a.state.Store(permitHeld)
	return PickResult{OK: true}
}

// reopensIn is how long until the first open breaker lets probes through
// (a second when an upstream is usable but full, or none is open).
func (s *UpstreamSet) reopensIn(now time.Time, ups []*Upstream) time.Duration {
	soonest := time.Duration(math.MaxInt64)
	for _, u := range ups {
		if d := u.brk.OpenFor(now); d > 0 {
			soonest = min(soonest, d)
		} else {
			soonest = min(soonest, time.Second)
		}
	}
	return soonest
}

// HasAlternative reports whether an upstream other than avoid could take
// an attempt at now (its breaker lets one through).
func (s *UpstreamSet) HasAlternative(now time.Time, avoid *Upstream) bool {
	for _, u := range s.Upstreams() {
		if u != avoid && u.brk.Available(now) {
			return true
		}
	}
	return false
}
