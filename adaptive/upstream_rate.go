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
		u, w, usable := s.soonestUpstream(now, ups, cost)
		switch {
		case !usable:
			return 0, true, false
		case u == nil:
			return 0, false, true
		case w > maxWait:
			return 0, false, false
		}
		if w, ok, tl := u.quota.reserve(now, &res.up, cost, maxWait); ok {
			res.bound = u
			return w, true, false
		} else if tl {
			return 0, false, true
		}
	}
	return 0, false, false
}

// soonestUpstream returns the usable upstream where cost fits soonest and
// that wait; usable is false when no upstream is usable, u nil when cost
// never fits any usable upstream. Among equal waits the best scored wins
// (scores are computed only for ties).
func (s *UpstreamSet) soonestUpstream(now time.Time, ups []*Upstream, cost costs) (u *Upstream, wait time.Duration, usable bool) {
	best, bestScore, scored := int64(math.MaxInt64), 0.0, false
	for _, c := range ups {
		if !c.brk.Available(now) {
			continue
		}
		usable = true
		w := c.quota.waitFor(c.quota.clk.Ticks(now), cost)
		switch {
		case w < 0 || w > best:
			continue
		case w < best:
			u, best, scored = c, w, false
			continue
		}
		if !scored {
			bestScore, scored = score(now, u, u.limit(), u.inflight.Load()), true
		}
		if sc := score(now, c, c.limit(), c.inflight.Load()); sc > bestScore {
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
func (s *UpstreamSet) soonest(now time.Time, cost costs) (time.Duration, bool) {
	u, w, _ := s.soonestUpstream(now, s.Upstreams(), cost)
	return w, u != nil
}

// Follow reports whether the provider's rate-limit headers are followed.
func (s *UpstreamSet) Follow() bool { return s.follow.Load() }
