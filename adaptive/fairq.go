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
// waits as the tenant's debt until its next enqueue. A tenant pays for what
// it used beyond its estimate; a refund moves its tags back no further
// than V, whether it is backlogged (shift) or idle (its next start tag is
// max(V, finish)), so no tenant saves up credit.
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
	left      uint64   // waiters that reached their deadline or whose client left
	leavers   leavers  // the latest of them: when, and their start tags
	// stay is the waiters expected to stay until served: each counts
	// its waiter.stay.
	stay    float64
	lapsing int // waiters expected to reach their deadline first (waiter.lapsing)
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
	// canceled is the smoothed share of the lane's waiters that their
	// client canceled (of those served, timed out or canceled).
	canceled float64
	// turnover measures how fast the lane is served while it has
	// waiters: per is the smoothed time between two of its grants (0
	// before the first), last the last grant, busy when the lane last
	// went from empty to not (idle time does not count).
	per        float64
	last, busy time.Time
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
	next, prev  *waiter       // lane FIFO
	tag, finish float64       // start and finish tags, minus the lane's offset
	cost        int64         // estimated tokens (Limiter.flowCost)
	prompt      int64         // the prompt part of cost
	est         time.Duration // wait the model estimated at enqueue (0: none)
	told        time.Duration // est corrected by the calibration (calibration.correct)
	grants      float64       // grants the estimate counted
	leftAt      uint64        // fairQueue.leftAbove at enqueue
	served      float64       // its start tag when it was served (pop)
	// lapsing: queued although even its shortest plausible wait exceeded
	// its deadline, because the estimate had not proven itself: expected
	// to reach its deadline before its turn, so not counted ahead of
	// later requests (fairQueue.ahead).
	lapsing bool
	// stay is how much the waiter counts ahead of later requests: 0 when
	// lapsing, else the share of its lane's waiters that stayed until
	// served (clients that give up do so from anywhere in the queue).
	stay float64
	seq  uint64
	t    *tenant
	cls  *classState
	enq  time.Time

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
		ln.busy = w.enq
		ln.blocked = false
		lv.serve.push(ln)
		lv.victims.push(ln)
	} else {
		lv.victims.fix(ln)
	}
	lv.n++
	lv.tokens += w.cost
	if w.lapsing {
		lv.lapsing++
		w.stay = 0
	} else {
		w.stay = 1 - ln.canceled
	}
	lv.stay += w.stay
	q.n++
	q.nonZero |= 1 << w.level
}

// remove takes a waiter that was not served out of the queue (timeout,
// cancel, displacement), and the tenant is not charged for what it never
// got: when it was its lane's last request, the lane's finish tag goes
// back to its start tag; when it was the head (the oldest, the one that
// times out first), every request behind it moves up by its cost. (One
// leaving from the middle, rarer, leaves its gap.) So the level's virtual
// time only moves with service.
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
	w.served = w.tag + ln.offset
	ln.ended(false)
	from := ln.last
	if ln.busy.After(from) {
		from = ln.busy
	}
	if x := now.Sub(from).Seconds(); ln.per == 0 {
		ln.per = x
	} else {
		ln.per += laneAlpha * (x - ln.per)
	}
	ln.last = now
	lv.vtime = math.Max(lv.vtime, w.tag+ln.offset)
	lv.maxFinish = math.Max(lv.maxFinish, w.finish+ln.offset)
	q.unlink(w)
	if lv.n == 0 {
		lv.vtime = lv.maxFinish
	}
	return w
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
	if w.lapsing {
		lv.lapsing--
	}
	lv.stay -= w.stay
	if lv.n == 0 {
		lv.stay = 0 // no drift from rounding
	}
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

// shift moves ln's finish tag and the tags of its waiters by d. A refund
// (d < 0) moves a lane with waiters back at most until its head's start
// tag is just after the level's virtual time (refundBound): a waiter is
// never put before requests already served, so a tenant that stays
// backlogged cannot bank refunds and overtake a tenant that arrives now
// (which starts at V, and whose own refunds, settled while it had no
// waiter, are forgiven the same way). Without the bound, a backlogged
// tenant whose requests were overestimated (no max_tokens) was served
// ahead of every newcomer.
func (q *fairQueue) shift(ln *lane, d float64) {
	lv := &q.levels[ln.level]
	if d < 0 && ln.n > 0 {
		d = min(max(d, lv.vtime+refundBound-(ln.head.tag+ln.offset)), 0)
	}
	ln.finish += d
	if ln.n == 0 || d == 0 {
		return
	}
	ln.offset += d
	if !ln.blocked {
		lv.serve.fix(ln)
	}
	lv.victims.fix(ln)
}

// laneAlpha weighs a new interval in a lane's turnover (about the last
// five grants: a lane's pace follows its competition, which moves).
const laneAlpha = 0.2

// laneWait is how long the request after the n waiters of ln would wait
// at the pace the lane has been served, whoever served meanwhile: 0 when
// the lane has no waiter or its pace is not known, or was measured more
// than a few of its grants ago.
func (q *fairQueue) laneWait(ln *lane, now time.Time) float64 {
	if ln.n == 0 || ln.per <= 0 || now.Sub(ln.last).Seconds() > 4*ln.per+1 {
		return 0
	}
	return float64(ln.n+1) * ln.per
}

// refundBound is how far after the virtual time a refund may bring a
// backlogged lane's head: a token, so that a tenant arriving now (start
// tag V) goes before it rather than tying and losing on arrival order.
const refundBound = 1

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

// above counts the waiters of the levels above lvl that are expected to
// be served (their stay).
func (q *fairQueue) above(lvl int) float64 {
	var a float64
	for i := 0; i < lvl; i++ {
		lv := &q.levels[i]
		a += math.Max(lv.stay, 0)
	}
	return a
}

// ahead estimates, in requests, what would be served before a request
// with start tag tag arriving at lvl: the waiters of the levels above, and
// of its own level the tokens SFQ serves before tag (each lane with
// waiters gets up to tag - V tokens first), converted at the level's mean
// waiting cost; in both, only the waiters expected to be served: each
// counts as the share of its lane's waiters that stayed until served
// (clients give up from anywhere in the queue, whatever it estimates).
// Waiters queued before the estimate had proven itself although even their
// shortest plausible wait exceeded their deadline (lapsing) are expected
// to leave first: counted, the estimate of a request arriving just after
// the queue began to refuse was the backlog of the requests about to time
// out, and it was refused although it would have been served.
func (q *fairQueue) ahead(lvl int, tag float64) float64 {
	a := q.above(lvl)
	lv := &q.levels[lvl]
	if lv.n == 0 {
		return a
	}
	tok := math.Min(float64(lv.tokens), float64(len(lv.victims.lanes))*math.Max(tag-lv.vtime, 0))
	return a + tok*math.Max(lv.stay, 0)/float64(lv.tokens)
}

// cancelAlpha weighs one waiter's end in its lane's share of cancels.
const cancelAlpha = 0.1

// ended notes that a waiter of ln ended: canceled by its client, or not
// (served, or its deadline passed).
func (ln *lane) ended(canceled bool) {
	x := 0.0
	if canceled {
		x = 1
	}
	ln.canceled += cancelAlpha * (x - ln.canceled)
}

// leftAbove counts the waiters of the levels above lvl that ever left
// without a permit (reached their deadline, or were canceled by their
// client): all of them were ahead of a request at lvl.
func (q *fairQueue) leftAbove(lvl int) uint64 {
	var n uint64
	for i := 0; i < lvl && i < len(q.levels); i++ {
		n += q.levels[i].left
	}
	return n
}

// leavers remembers the latest waiters of a level that left without a
// permit: when, and their start tag, so that a request served later can
// tell how many of those that left while it waited were ahead of it
// (their start tag below its own). Displaced waiters are not counted: a
// full queue gives up the one it would serve last.
type leavers struct {
	at   [leaversKept]time.Time
	tag  [leaversKept]float64
	next int
}

// leaversKept bounds the leavers a level remembers: a request behind more
// than that many of them is told so much too long that it is refused
// nowhere near its deadline anyway.
const leaversKept = 256

func (lv *leavers) add(at time.Time, tag float64) {
	lv.at[lv.next], lv.tag[lv.next] = at, tag
	lv.next = (lv.next + 1) % leaversKept
}

// ahead counts the leavers that left after since with a start tag below
// tag.
func (lv *leavers) ahead(since time.Time, tag float64) uint64 {
	var n uint64
	for i := range lv.at {
		if lv.at[i].After(since) && lv.tag[i] < tag {
			n++
		}
	}
	return n
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
