package adaptive

import "time"

// A permit released by a tenant that holds less than its share while
// others wait is kept for that tenant's next request for a moment
// (keepFor), instead of going to the queue at once. A client in a closed
// loop sends its next request the moment its answer ends; without this,
// the permit its own answer freed went to a waiter of a busier tenant,
// and its next request waited for the next permit to come free: a tenant
// of a few clients beside one of many got noticeably less than it got
// alone although its demand was below its share (BENCHMARKS.md, "Fair
// queue"). A kept permit that is not claimed in
// time goes to the queue at the next arrival, release or deadline; the
// cost is that moment, for one permit, and only while a queue waits.
//
// Everything here is under Limiter.mu; keptN mirrors len(kept) for the
// lock-free paths.
type keptSlot struct {
	t     *tenant
	until time.Time
}

// maxKept bounds the permits kept at once.
const maxKept = 8

// keepFor is how long a released permit waits for its tenant's next
// request: a twentieth of a permit's mean hold time, at most 50 ms (a
// client on the same host or network sends again within milliseconds).
func keepFor(hold float64) time.Duration {
	return min(50*time.Millisecond, time.Duration(hold/20*float64(time.Second)))
}

// keepLocked decides, at the release of one of t's permits while requests
// wait, whether to keep it for t: t has no waiter of its own, holds less
// than an equal split of the limit among the tenants waiting and itself,
// and fewer than maxKept permits are kept. It reports whether it kept it
// (the permit then stays counted in flight).
func (l *Limiter) keepLocked(t *tenant, now time.Time, hold float64) bool {
	if l.keepOff || len(l.kept) >= maxKept || t.waiting() > 0 || hold <= 0 {
		return false
	}
	tenants := 1
	for i := range l.q.levels {
		tenants += len(l.q.levels[i].victims.lanes)
	}
	if t.held()*int64(tenants) >= l.limit.Load() {
		return false
	}
	l.kept = append(l.kept, keptSlot{t: t, until: now.Add(keepFor(hold))})
	l.keptN.Store(int32(len(l.kept)))
	return true
}

// claimLocked takes a permit kept for t, if there is one, and reports
// whether it did (the permit is still counted in flight: it is t's now).
func (l *Limiter) claimLocked(t *tenant) bool {
	for i, k := range l.kept {
		if k.t == t {
			l.kept = append(l.kept[:i], l.kept[i+1:]...)
			l.keptN.Store(int32(len(l.kept)))
			return true
		}
	}
	return false
}

// expireKeptLocked gives the kept permits whose moment passed (all of
// them, with all) back to the queue: it reports whether any was.
func (l *Limiter) expireKeptLocked(now time.Time, all bool) bool {
	n := 0
	for _, k := range l.kept {
		if all || !now.Before(k.until) {
			l.inflight.Add(-1)
			continue
		}
		l.kept[n] = k
		n++
	}
	freed := n < len(l.kept)
	clear(l.kept[n:])
	l.kept = l.kept[:n]
	l.keptN.Store(int32(n))
	return freed
}

// Kept is the number of released permits kept for their tenants' next
// requests now (counted in Stats.Inflight, but held by no request).
func (l *Limiter) Kept() int { return int(l.keptN.Load()) }
