package adaptive

import (
	"math"
	"math/bits"
	"time"
)

// The wait queue orders waiters in levels: two per class, in priority
// order (class 0's first attempts, class 0's retries, class 1's first
// attempts, ...). A permit goes to the first level whose class is under
// its share; a level is served by start-time fair queueing (SFQ, Goyal et
// al. 1996) over its tenants, with the request's token cost as its length:
//
//   - each tenant has a lane per level, a FIFO of its waiters, and the
//     lane remembers the virtual finish tag of its last request;
//   - a request arriving at a level with virtual time V gets the start tag
//     S = max(V, finish of its lane) and finish tag S + cost;
//   - the waiter with the smallest start tag is served first, and V becomes
//     its start tag (the largest finish tag served when the level empties).
//
// So every backlogged tenant of a level gets the same tokens per round
// whatever its request sizes, a tenant that was idle starts at V (no credit
// saved up, no penalty), and within a tenant the order is FIFO. The lanes
// with waiters sit in two binary heaps per level (laneheap.go): by their
// head's start tag, to serve, and by their tail's, to find the waiter a
// full queue gives up (the one it would serve last). Enqueue, dequeue and
// removal are O(log tenants); everything else is O(1).
//
// Settlement: when a request ends, the difference between its actual and
// estimated tokens moves its tenant's lane at that level: the tags of the
// waiters still in the lane shift by it (one offset per lane, so O(log n)),
// and so does the lane's finish tag. When the lane is empty the difference
// waits as the tenant's debt until its next enqueue. A tenant that stays
// backlogged pays for (or is refunded) what it really used; one that went
// idle has its debt forgiven as far as V moved past it.
//
// Everything here is under Limiter.mu; nothing allocates once lanes exist.
type fairQueue struct {
	levels  []level
	n       int    // waiters, all levels
	seq     uint64 // arrival counter
	nonZero uint32 // bit per level with waiters
}

// level is one priority level: its SFQ clock and the lanes with waiters.
type level struct {
	serve     laneHeap // lanes with waiters, not blocked, by head tag
	victims   laneHeap // lanes with waiters, by tail tag, largest first
	vtime     float64  // virtual time: start tag of the last request served
	maxFinish float64  // largest finish tag served
	n         int      // waiters
	tokens    int64    // their cost
	vclock    vclock   // how fast vtime moves while the level has waiters
}

// lane is one tenant's FIFO at one level.
type lane struct {
	t          *tenant
	level      uint8
	blocked    bool     // tenant at its cap: out of the serve heap until it releases
	idx        [2]int32 // in the serve and victim heaps; -1 when out
	n          int32
	head, tail *waiter
	finish     float64 // finish tag of the last request enqueued
	// offset is added to the tags of the lane's waiters (settlements made
	// while they waited); 0 when the lane is empty.
	offset float64
}

// Waiter states, under Limiter.mu.
const (
	wQueued uint8 = iota
	wGranted
	wDisplaced
	wLeft // timed out, canceled or rejected before queueing
)

// waiter is one request waiting for a permit. It is pooled with its
// channel and timer, so waiting allocates nothing in steady state.
type waiter struct {
	ch    chan struct{} // buffered(1): resolved (granted or displaced)
	timer *time.Timer

	state       uint8
	level       uint8
	lane        *lane
	next, prev  *waiter // lane FIFO
	tag, finish float64 // start and finish tags, minus the lane's offset
	cost        int64
	seq         uint64
	t           *tenant
	cls         *classState
	enq         time.Time

	at       time.Time // grant time
	inflight int       // in flight right after the grant
	refusal  Refusal   // when displaced
}

func levelOf(class int, retry bool) int {
	if retry {
		return 2*class + 1
	}
	return 2 * class
}

// reset empties the queue and sizes it for n levels.
func (q *fairQueue) reset(n int) {
	q.levels = make([]level, n)
	for i := range q.levels {
		q.levels[i].victims.victim = true
	}
	q.n, q.nonZero = 0, 0
}

// laneOf returns t's lane at lvl, sizing t's lanes to the queue's levels
// (only ever done while t has no waiter).
func (q *fairQueue) laneOf(t *tenant, lvl int) *lane {
	if len(t.lanes) != len(q.levels) {
		t.lanes = make([]lane, len(q.levels))
		for i := range t.lanes {
			t.lanes[i] = lane{t: t, level: uint8(i), idx: [2]int32{-1, -1}}
		}
	}
	return &t.lanes[lvl]
}

// startTag is the start tag a request of t would get at lvl now.
func (q *fairQueue) startTag(t *tenant, lvl int) float64 {
	ln := q.laneOf(t, lvl)
	return math.Max(q.levels[lvl].vtime, ln.finish+float64(t.debt.Load()))
}

// push queues w (t, level and cost set) at the back of its lane.
func (q *fairQueue) push(w *waiter) {
	lv := &q.levels[w.level]
	ln := q.laneOf(w.t, int(w.level))
	if d := w.t.debt.Swap(0); d != 0 {
		// Usage settled while this lane was empty: it moves the lane's
		// waiters too, if any, so the lane stays FIFO.
		q.shift(ln, float64(d))
	}
	start := math.Max(lv.vtime, ln.finish)
	ln.finish = start + float64(w.cost)
	w.tag, w.finish = start-ln.offset, ln.finish-ln.offset
	q.seq++
	w.seq, w.lane, w.state = q.seq, ln, wQueued

	w.next, w.prev = nil, ln.tail
	if ln.tail != nil {
		ln.tail.next = w
	} else {
		ln.head = w
	}
	ln.tail = w
	ln.n++
	if ln.n == 1 {
		ln.blocked = false
		lv.serve.push(ln)
		lv.victims.push(ln)
	} else {
		lv.victims.fix(ln)
	}
	lv.n++
	lv.tokens += w.cost
	q.n++
	q.nonZero |= 1 << w.level
}

// remove takes a waiter that was not served out of the queue (timeout,
// cancel, displacement), and the tenant is not charged for what it never
// got: when it was its lane's last request, the lane's finish tag goes
// back to its start tag; when it was the head (the oldest, the one that
// times out first), every request behind it moves up by its cost. (One
// leaving from the middle, rarer, leaves its gap.) So the level's virtual
// time only moves with service, which its speed measures.
func (q *fairQueue) remove(w *waiter) {
	ln := w.lane
	switch {
	case w == ln.tail:
		ln.finish = w.tag + ln.offset
	case w == ln.head:
		// Shift after unlinking, so the heaps see the new head's key.
		defer q.shift(ln, -float64(w.cost))
	}
	q.unlink(w)
}

// pop serves the head of ln at now: it leaves the queue and its level's
// virtual time advances to its start tag.
func (q *fairQueue) pop(ln *lane, now time.Time) *waiter {
	w := ln.head
	lv := &q.levels[ln.level]
	lv.vtime = math.Max(lv.vtime, w.tag+ln.offset)
	lv.maxFinish = math.Max(lv.maxFinish, w.finish+ln.offset)
	q.unlink(w)
	lv.vclock.served(now, lv.vtime)
	if lv.n == 0 {
		lv.vtime = lv.maxFinish
		lv.vclock.idle()
	}
	return w
}

// vclock measures the speed of a level's virtual time while it has
// waiters: tokens of service per second that each backlogged tenant
// receives. A request with start tag S waits about (S - V) / speed at its
// level (plus what the levels above take first), whoever else is
// backlogged or arrives meanwhile: that is what SFQ's virtual time means.
type vclock struct {
	speed   float64   // smoothed virtual tokens per second; 0 before the first
	samples int       // speed samples taken
	t0      time.Time // reference point; zero when the level was idle
	v0      float64
	grants  int // since the reference point
}

// vclockSpan is the shortest span of a speed sample: grants come in
// bursts when permits end together, and a sample must average over them.
const vclockSpan = 2 * time.Second

func (c *vclock) served(now time.Time, v float64) {
	if c.t0.IsZero() {
		c.t0, c.v0, c.grants = now, v, 0
		return
	}
	c.grants++
	dt := now.Sub(c.t0)
	if dt < vclockSpan {
		return
	}
	x := (v - c.v0) / dt.Seconds()
	c.samples++
	if c.speed == 0 {
		c.speed = x
	} else {
		c.speed += 0.3 * (x - c.speed)
	}
	c.t0, c.v0, c.grants = now, v, 0
}

// idle forgets the reference point: the level emptied and its virtual time
// jumps, which is not service.
func (c *vclock) idle() { c.t0 = time.Time{} }

// vclockSettled is the number of speed samples (of vclockSpan each) after
// which a level's speed is trusted to refuse requests early. A cold burst
// drains slowly at first (connections being opened, a provider warming
// up): one sample would refuse requests that are served in time.
const vclockSettled = 2

// wait estimates the time until a request with start tag tag is reached at
// lvl; ok is false before the level's speed was measured, and settled
// true once it has been measured vclockSettled times.
func (q *fairQueue) wait(lvl int, tag float64) (d time.Duration, ok, settled bool) {
	lv := &q.levels[lvl]
	if lv.vclock.speed <= 0 {
		return 0, false, false
	}
	d = time.Duration(math.Max(tag-lv.vtime, 0) / lv.vclock.speed * float64(time.Second))
	return d, true, lv.vclock.samples >= vclockSettled
}

func (q *fairQueue) unlink(w *waiter) {
	ln, lv := w.lane, &q.levels[w.level]
	wasHead, wasTail := w == ln.head, w == ln.tail
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		ln.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		ln.tail = w.prev
	}
	ln.n--
	switch {
	case ln.n == 0:
		lv.serve.remove(ln)
		lv.victims.remove(ln)
		ln.blocked, ln.offset = false, 0
	case wasHead && !ln.blocked:
		lv.serve.fix(ln)
	case wasTail:
		lv.victims.fix(ln)
	}
	lv.n--
	lv.tokens -= w.cost
	q.n--
	if lv.n == 0 {
		q.nonZero &^= 1 << w.level
	}
	w.next, w.prev, w.lane = nil, nil, nil
}

// settle charges t the difference d between a request's actual and
// estimated tokens at level lvl: the tags of its waiting requests there
// move by d, or, with none waiting, d waits as debt for its next enqueue.
func (q *fairQueue) settle(t *tenant, lvl int, d int64) {
	if lvl >= len(t.lanes) || t.lanes[lvl].n == 0 || len(t.lanes) != len(q.levels) {
		t.debt.Add(d)
		return
	}
	q.shift(&t.lanes[lvl], float64(d))
}

// shift moves ln's finish tag and the tags of its waiters by d.
func (q *fairQueue) shift(ln *lane, d float64) {
	ln.finish += d
	if ln.n == 0 {
		return
	}
	ln.offset += d
	lv := &q.levels[ln.level]
	if !ln.blocked {
		lv.serve.fix(ln)
	}
	lv.victims.fix(ln)
}

// block takes ln out of its level's heap: its tenant is at its cap.
func (q *fairQueue) block(ln *lane) {
	q.levels[ln.level].serve.remove(ln)
	ln.blocked = true
}

// unblock puts t's blocked lanes back in their heaps.
func (q *fairQueue) unblock(t *tenant) {
	for i := range t.lanes {
		if ln := &t.lanes[i]; ln.blocked && ln.n > 0 && i < len(q.levels) {
			ln.blocked = false
			q.levels[i].serve.push(ln)
		}
	}
}

// victim returns the waiter a full queue gives up first: of the last
// level with waiters, the one it would serve last (the largest start tag:
// the most recent waiter of the tenant furthest ahead of its share). nil
// when the queue is empty.
func (q *fairQueue) victim() *waiter {
	if q.nonZero == 0 {
		return nil
	}
	return q.levels[31-bits.LeadingZeros32(q.nonZero)].victims.top().tail
}

// outranks reports whether a request arriving at lvl with start tag tag
// would be served before waiter v: a full queue then gives up v for it.
func outranks(lvl int, tag float64, v *waiter) bool {
	return lvl < int(v.level) || (lvl == int(v.level) && tag < v.tag+v.lane.offset)
}

// above counts the waiters of the levels above lvl.
func (q *fairQueue) above(lvl int) float64 {
	var a float64
	for i := 0; i < lvl; i++ {
		a += float64(q.levels[i].n)
	}
	return a
}

// ahead estimates, in requests, what would be served before a request
// with start tag tag arriving at lvl: every waiter of the levels above,
// and of its own level the tokens SFQ serves before tag (each lane with
// waiters gets up to tag - V tokens first), converted at the level's mean
// waiting cost.
func (q *fairQueue) ahead(lvl int, tag float64) float64 {
	a := q.above(lvl)
	lv := &q.levels[lvl]
	if lv.n == 0 {
		return a
	}
	tok := math.Min(float64(lv.tokens), float64(len(lv.victims.lanes))*math.Max(tag-lv.vtime, 0))
	return a + tok*float64(lv.n)/float64(lv.tokens)
}

// all returns every waiter.
func (q *fairQueue) all() []*waiter {
	ws := make([]*waiter, 0, q.n)
	for i := range q.levels {
		for _, ln := range q.levels[i].victims.lanes {
			for w := ln.head; w != nil; w = w.next {
				ws = append(ws, w)
			}
		}
	}
	return ws
}
