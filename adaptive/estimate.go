package adaptive

import (
	"time"
)

// waitEstimate is the wait estimated for a request arriving now: what it
// is expected to wait (est), the least it could wait if its class got
// every permit it may ever get meanwhile (soon: its largest share of the
// highest limit of the last limitMemory, or, when the limit has been
// climbing, of as much again above it, turning over as fast as any
// class's permits do), and behind how many grants.
type waitEstimate struct {
	est, soon time.Duration
	grants    float64
}

// limitMemory is how far back the estimate of the shortest wait looks for
// the limit: an adaptive limit that was higher a moment ago may be again
// before a request now queued gets its turn.
const limitMemory = 10 * time.Second

// estimateLocked estimates how long a request of tenant t arriving at
// level lvl (class c) at now would wait, and behind how many grants: zero
// when a permit is free for it and nothing is ahead. Otherwise it needs the
// grants that serve what is ahead of it (the levels above, and of its own
// level what start-time fair queueing serves before its start tag:
// fairQueue.ahead), less the permits free for its class, plus its own; and
// its class gets permits at the rate they turn over, by Little's law: the
// permits it may use (its share of the current limit, less what the
// classes above hold) over the mean time a permit is held; or, for a
// tenant that already has waiters at the level, at the pace its lane has
// been served, when that is slower. With a per-tenant cap, the tenant's
// own turnover bounds it too. Zero when no permit of the provider has
// ended yet.
//
// The estimate counts requests, never token costs (a request that sets no
// max_tokens costs a guess until it ends), and reads the current limit and
// shares, so a reload or a limit that moves changes it at once. It does not
// count requests of other tenants that arrive later with earlier start
// tags (the calibration corrects for them on average). How far it is from
// the waits that follow is measured all the time (calibration.go); a
// request is refused on it only when even soon, the wait with the class's
// largest share of the recent highest limit, exceeds its deadline by more
// than the estimate has lately been off. Under l.mu.
func (l *Limiter) estimateLocked(now time.Time, qc *queueConf, c, lvl int, t *tenant) waitEstimate {
	lim := l.limit.Load()
	limHigh := l.limHigh.observe(now, lim, limitMemory)
	// A limit that has been climbing (a cold start, a provider with room)
	// may climb as much again while the request waits.
	if lo := l.limLow.observe(now, -lim, limitMemory); -lo < lim {
		limHigh = max(limHigh, 2*lim+lo)
	}
	cs := qc.classes[c]
	hold := cs.hold(qc.classes)
	if hold <= 0 {
		return waitEstimate{}
	}
	capC := classCap(cs, lim)
	var higher int64
	for i := 0; i < c; i++ {
		higher += qc.classes[i].inflight.Load()
	}
	slots := max(min(capC, lim-higher), 1)
	// The shortest plausible wait: the permits of the classes above
	// (already counted in grants for those waiting) may all turn over to
	// this class, up to its largest share of the recent or climbing limit,
	// at the pace of the class whose permits turn over fastest.
	slotsSoon := max(int64(qc.set.Classes[c].MaxShare*float64(limHigh)), slots)
	holdSoon := hold
	for _, o := range qc.classes {
		if h := o.holdTime.load(); h > 0 {
			holdSoon = min(holdSoon, h)
		}
	}
	free := max(min(lim-l.inflight.Load(), capC-cs.inflight.Load()), 0)
	ahead := l.q.ahead(lvl, l.q.startTag(t, lvl))
	var e waitEstimate
	if ahead >= float64(free) {
		e.grants = ahead - float64(free) + 1
	}
	secs, soon := e.grants*hold/float64(slots), e.grants*holdSoon/float64(slotsSoon)
	// A tenant with waiters of its own is served at the pace its lane
	// has been served: that counts the requests of other tenants and of
	// higher classes that arrived meanwhile and went first, which the
	// count above cannot know.
	ln := &t.lanes[lvl]
	if lw := l.q.laneWait(ln, now); lw > secs {
		secs, e.grants = lw, max(e.grants, float64(ln.n+1))
	}
	if tcap := t.capOf(qc.tenantCap); tcap > 0 {
		mine := float64(t.lanes[lvl].n)
		if freeT := tcap - t.held(); mine >= float64(freeT) {
			own := mine - float64(max(freeT, 0)) + 1
			if s := own * hold / float64(tcap); s > secs {
				secs, e.grants = s, max(e.grants, own)
			}
			soon = max(soon, own*hold/float64(tcap))
		}
	}
	e.est, e.soon = time.Duration(secs*float64(time.Second)), time.Duration(soon*float64(time.Second))
	return e
}

// recentMax is the highest value seen in the current span and the one
// before it. Under Limiter.mu.
type recentMax struct {
	cur, prev int64
	start     time.Time
}

// observe notes v at now and returns the highest value of the last one
// to two spans.
func (m *recentMax) observe(now time.Time, v int64, span time.Duration) int64 {
	switch {
	case m.start.IsZero():
		m.prev, m.cur, m.start = v, v, now
	case now.Sub(m.start) >= span:
		m.prev, m.cur, m.start = m.cur, v, now
	}
	m.cur = max(m.cur, v)
	return max(m.cur, m.prev)
}

// hold is the class's smoothed permit hold time in seconds, or, for a
// class none of whose permits has ended yet, the mean of the classes that
// have one; 0 when none has.
func (c *classState) hold(all []*classState) float64 {
	if h := c.holdTime.load(); h > 0 {
		return h
	}
	var sum float64
	n := 0
	for _, o := range all {
		if h := o.holdTime.load(); h > 0 {
			sum += h
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// refusalLocked describes a refusal of a request of t at level lvl of
// class c: Retry-After is the wait a request of the same flow arriving now
// is estimated to have, as calibrated. Under l.mu.
func (l *Limiter) refusalLocked(qc *queueConf, c, lvl int, t *tenant) Refusal {
	now := l.clock.Now()
	e := l.estimateLocked(now, qc, c, lvl, t)
	cs := qc.classes[c]
	return Refusal{OverShare: l.inflight.Load() < l.limit.Load(), RetryAfter: cs.calib.correct(now, e.est, cs.hold(qc.classes))}
}
