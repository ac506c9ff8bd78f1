package adaptive

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/adaptive/internal/bucket"
)

// bindRate reserves cost within maxWait on the quota of the usable
// upstream where it fits soonest (the best scored among equals) and binds
// res to it. With no usable upstream it binds nothing and succeeds: Pick
// will answer for the breakers. It fails (nothing reserved) when the
// soonest fit is beyond maxWait, or, tooLarge, when no usable upstream's
// quota can ever fit cost.
func (s *UpstreamSet) bindRate(now time.Time, cost costs, maxWait time.Duration, res *Reservation) (wait time.Duration, ok, tooLarge bool) {
	ups := s.Upstreams()
	for range len(ups) + 1 { // a reservation lost to a race is retried
		u, w, usable := s.soonestUpstream(now, ups, res.key, cost)
		switch {
		case !usable:
			return 0, true, false
		case u == nil:
			return 0, false, true
		case w > maxWait:
			return 0, false, false
		}
		// A claim is taken even while nothing limits the quota: a limit
		// learned later counts it as unseen (Quota.learn).
		mq := u.accts.Load().acquire(now, res.key)
		if mq == nil { // no place for the account: nothing learned limits it
			res.bound = u
			return 0, true, false
		}
		if w, ok, tl := mq.q.reserve(now, &res.up, cost, maxWait); ok {
			res.bound, res.upq = u, mq
			return w, true, false
		} else if tl {
			mq.release()
			return 0, false, true
		}
		mq.release()
	}
	return 0, false, false
}

// soonestUpstream returns the usable upstream where cost fits soonest and
// that wait; usable is false when no upstream is usable, u nil when cost
// never fits any usable upstream. Among equal waits the best scored wins
// (scores are computed only for ties).
func (s *UpstreamSet) soonestUpstream(now time.Time, ups []*Upstream, key QuotaKey, cost costs) (u *Upstream, wait time.Duration, usable bool) {
	best, bestScore, scored := int64(math.MaxInt64), 0.0, false
	for _, c := range ups {
		if !c.brk.Available(now) {
			continue
		}
		usable = true
		w := c.waitFor(now, key, cost)
		switch {
		case w < 0 || w > best:
			continue
		case w < best:
			u, best, scored = c, w, false
			continue
		}
		if !scored {
			bestScore, scored = score(now, u, key, u.limit(), u.inflight.Load()), true
		}
		if sc := score(now, c, key, c.limit(), c.inflight.Load()); sc > bestScore {
			u, bestScore = c, sc
		}
	}
	if u == nil {
		return nil, 0, usable
	}
	return u, bucket.DurationOf(best), true
}

// soonest reports how long until cost would fit some usable upstream's
// quota (ok false when none is usable or none could ever fit it).
func (s *UpstreamSet) soonest(now time.Time, key QuotaKey, cost costs) (time.Duration, bool) {
	u, w, _ := s.soonestUpstream(now, s.Upstreams(), key, cost)
	return w, u != nil
}

// waitFor is how long until cost fits u's quota for key, in ticks (-1:
// never; 0 when the key has no place: nothing learned limits it).
func (u *Upstream) waitFor(now time.Time, key QuotaKey, cost costs) int64 {
	t := u.accts.Load()
	if !t.on() {
		return 0
	}
	mq := t.acquire(now, key)
	if mq == nil {
		return 0
	}
	defer mq.release()
	return mq.q.waitFor(mq.q.clk.Ticks(now), cost)
}

// spent is the largest share of its capacity that u's quota for key has
// spent in any dimension (0 when nothing limits it).
func (u *Upstream) spent(now time.Time, key QuotaKey) float64 {
	t := u.accts.Load()
	if !t.on() {
		return 0
	}
	mq := t.acquire(now, key)
	if mq == nil {
		return 0
	}
	defer mq.release()
	load := 0.0
	nt := mq.q.clk.Ticks(now)
	for d := range NumDims {
		if lv, c, ok := mq.q.b[d].Level(nt); ok && c > 0 {
			load = max(load, 1-float64(lv)/float64(c))
		}
	}
	return load
}

// Follow reports whether the provider's rate-limit headers are followed.
func (s *UpstreamSet) Follow() bool { return s.follow.Load() }
