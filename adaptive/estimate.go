package adaptive

import (
	"math"
	"time"
)

// drainRate measures how fast a class's queue drains: the smoothed time
// between two grants from the queue while the class had waiters the whole
// time. Idle time does not count (busy restarts the clock when the class's
// queue goes from empty to not), so it is the rate at which permits
// actually come free for the class, whatever holds them and whatever the
// higher classes take. Under Limiter.mu.
type drainRate struct {
	per  float64   // smoothed seconds per grant; 0 before the first
	last time.Time // last grant from the queue
	busy time.Time // when the queue last went from empty to not
}

// drainAlpha weighs a new interval in the smoothed drain rate (about the
// last ten grants).
const drainAlpha = 0.1

// waiting notes that the class's queue went from empty to not at now.
func (d *drainRate) waiting(now time.Time) { d.busy = now }

// granted notes a grant from the queue at now.
func (d *drainRate) granted(now time.Time) {
	from := d.last
	if d.busy.After(from) {
		from = d.busy
	}
	if !from.IsZero() {
		x := now.Sub(from).Seconds()
		if d.per == 0 {
			d.per = x
		} else {
			d.per += drainAlpha * (x - d.per)
		}
	}
	d.last = now
}

// perGrant is the time one grant takes now, in seconds: the smoothed
// interval, or, when the class has had waiters and no grant for longer
// than a permit's mean hold time (every permit could have turned over
// meanwhile: the class is held back by its share or by higher classes),
// that silence. 0 when unknown.
func (d *drainRate) perGrant(now time.Time, backlogged bool, hold float64) float64 {
	per := d.per
	if backlogged && hold > 0 {
		from := d.last
		if d.busy.After(from) {
			from = d.busy
		}
		if since := now.Sub(from).Seconds(); !from.IsZero() && since > hold {
			per = math.Max(per, since)
		}
	}
	return per
}

// estimateLocked estimates how long a request of tenant t arriving at
// level lvl (class c) at now would wait: zero when a permit is free for it
// and nothing is ahead; else the grants needed to reach it (the queue
// ahead of it, fairqueue.ahead) times the time one grant of its class
// takes (its drain rate; before the class has drained, its share of the
// limit over the mean hold time of a permit). With a per-tenant cap, the
// tenant's own turnover bounds it too. Zero when nothing has been measured
// yet. settled reports whether the level's drain has been measured long
// enough to refuse a request on the estimate (vclockSettled). Under l.mu.
func (l *Limiter) estimateLocked(now time.Time, qc *queueConf, c, lvl int, t *tenant) (time.Duration, bool) {
	lim := l.limit.Load()
	cs := qc.classes[c]
	capC := classCap(cs, lim)
	var higher int64
	for i := 0; i < c; i++ {
		higher += qc.classes[i].inflight.Load()
	}
	slots := max(min(capC, lim-higher), 1)
	free := max(min(lim-l.inflight.Load(), capC-cs.inflight.Load()), 0)
	tag := l.q.startTag(t, lvl)
	ahead := l.q.ahead(lvl, tag)
	hold := math.Float64frombits(cs.holdEWMA.Load())
	if hold <= 0 {
		hold = meanHold(qc.classes)
	}
	per := cs.drain.perGrant(now, cs.waiting.Load() > 0, hold)
	if per <= 0 {
		per = hold / float64(slots)
	}
	est := 0.0
	d, ok, settled := l.q.wait(lvl, tag)
	switch {
	case ahead < float64(free):
	case ok:
		// The levels above are served first; then this level's virtual
		// time has to reach the request's start tag, at the speed it has
		// been moving (which counts every tenant competing at the level,
		// including those that will arrive meanwhile). V is the start tag
		// of the request served last, so the distance includes one
		// request: at least one grant's time.
		est = l.q.above(lvl)*per + math.Max(d.Seconds(), per)
	default:
		est = (ahead - float64(free) + 1) * per
	}
	if qc.tenantCap > 0 && hold > 0 {
		mine := float64(t.lanes[lvl].n)
		if freeT := qc.tenantCap - t.held(); mine >= float64(freeT) {
			est = max(est, (mine-float64(max(freeT, 0))+1)*hold/float64(qc.tenantCap))
		}
	}
	return time.Duration(est * float64(time.Second)), settled
}

// meanHold is the mean smoothed hold time of the classes that have one
// (for a class none of whose permits has ended yet); 0 when none has.
func meanHold(cs []*classState) float64 {
	var sum float64
	n := 0
	for _, c := range cs {
		if h := math.Float64frombits(c.holdEWMA.Load()); h > 0 {
			sum += h
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// refusalLocked describes a refusal at now of a request of t at level lvl
// of class c. Under l.mu.
func (l *Limiter) refusalLocked(now time.Time, qc *queueConf, c, lvl int, t *tenant) Refusal {
	est, _ := l.estimateLocked(now, qc, c, lvl, t)
	return Refusal{OverShare: l.inflight.Load() < l.limit.Load(), RetryAfter: est}
}
