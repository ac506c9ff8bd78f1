package adaptive

import (
	"math/bits"
	"time"
)

// Acquire grants p to a request of flow f, waiting in queue order when no
// permit is free for it. cancel may be nil; now is the caller's current
// time. It refuses, with p.Refusal() saying whether the flow was over its
// share and when to retry:
//
//   - ErrDeadline at once when the wait estimated from the queue ahead
//     (estimateLocked) exceeds f's deadline (MaxWaitFor) by
//     more than the estimate has recently been off (calibration.go), and
//     only while it has proven itself on the waits that followed it;
//   - ErrQueueFull at once when MaxWaiting requests wait and none ranks
//     below f: a full queue gives up the waiter it would serve last (the
//     lowest level: lower classes, and retries of a class before its first
//     attempts; in it the most recent request of the tenant furthest ahead
//     of its share), and a newcomer that would be served after it is the
//     one refused;
//   - ErrDisplaced when f was waiting and such a newcomer took its place;
//   - ErrQueueTimeout when the deadline passes while waiting;
//   - ErrCanceled when cancel is closed first.
//
// When the grant races with the timeout or cancel, the grant wins: Acquire
// grants p and returns no error, and a caller that has been canceled in the
// meantime must Finish it.
func (l *Limiter) Acquire(now time.Time, f Flow, cancel <-chan struct{}, p *Permit) error {
	if l.TryAcquire(now, f, p) {
		return nil
	}
	w, wait, err := l.enqueue(now, f, p)
	if err != nil {
		return err
	}
	if wait > 0 {
		err = l.await(w, wait, cancel)
	}
	return l.resolve(w, now, err, p)
}

// await waits for w to be resolved, its deadline or cancel. It returns
// nil when w was resolved (granted or displaced), else the reason it
// stopped waiting; in that case w left the queue unless it was resolved in
// the meantime (then the resolution wins and the error is nil).
func (l *Limiter) await(w *waiter, wait time.Duration, cancel <-chan struct{}) error {
	w.timer.Reset(wait)
	var err error
	select {
	case <-w.ch:
		w.timer.Stop()
		return nil
	case <-w.timer.C:
		err = ErrQueueTimeout
	case <-cancel:
		w.timer.Stop()
		err = ErrCanceled
	}
	if l.leave(w, err) {
		return err
	}
	<-w.ch // resolved while we were giving up: take it
	return nil
}

// resolve turns a waiter that was granted, displaced or left into
// Acquire's result, and returns w to the pool.
func (l *Limiter) resolve(w *waiter, now time.Time, err error, p *Permit) error {
	defer waiterPool.Put(w)
	switch {
	case err != nil:
		p.refusal = w.refusal
		return err
	case w.state == wDisplaced:
		p.refusal = w.refusal
		return ErrDisplaced
	}
	waited := max(w.at.Sub(now), 0)
	l.counted(w.cls, waited)
	p.grant(l, w.at, w.inflight, waited, w.t, w.cls, w.level, w.prompt, w.cost)
	return nil
}

// enqueue queues a request of f, or refuses it at once. The waiter it
// returns may be granted already (then wait is 0 and nothing is awaited);
// otherwise wait is the time left to the request's deadline.
func (l *Limiter) enqueue(now time.Time, f Flow, p *Permit) (*waiter, time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	qc := l.qc.Load()
	c := qc.classOf(f.Class)
	lvl := levelOf(c, f.Retry)
	cs := qc.classes[c]
	t := l.tenants.get(f.Tenant)
	for !t.pin() { // evicted since it was found: find it again
		t = l.tenants.get(f.Tenant)
	}
	t.setCap(f.MaxInflight)
	maxWait := deadlineOf(l.maxWait, l.clientWait, f.MaxWait, -1)
	l.refreshShares(now, false)
	refuse := func(err error) (*waiter, time.Duration, error) {
		p.refusal = l.refusalLocked(qc, c, lvl, t)
		t.unpin()
		t.rejected.Add(1)
		cs.rejected.Add(1)
		switch err {
		case ErrDeadline:
			l.rejectedEarly.Add(1)
		default:
			l.rejectedFull.Add(1)
		}
		return nil, 0, err
	}
	if len(l.kept) > 0 {
		if l.expireKeptLocked(now, false) {
			l.drainLocked(nil)
		}
		if w := l.claimKeptLocked(now, qc, cs, t, lvl, f); w != nil {
			return w, 0, nil
		}
	}
	if l.maxWaiting == 0 || maxWait <= 0 {
		return refuse(ErrQueueFull)
	}
	e := l.estimateLocked(now, qc, c, lvl, t)
	hold := cs.hold(qc.classes)
	told := cs.calib.correct(now, e.est, hold)
	proven := cs.calib.calibrated(now, hold)
	if proven && cs.calib.refusesEarly(e.soon, maxWait) {
		return refuse(ErrDeadline)
	}
	if l.q.n >= l.maxWaiting {
		v := l.q.victim()
		if v == nil || !outranks(lvl, l.q.startTag(t, lvl), v) {
			return refuse(ErrQueueFull)
		}
		l.displaceLocked(qc, v)
	}
	w := waiterPool.Get().(*waiter)
	w.t, w.cls, w.level, w.enq = t, cs, uint8(lvl), now
	w.prompt, w.cost = l.flowCost(f)
	w.est, w.told, w.grants, w.leftAt, w.refusal = e.est, told, e.grants, l.q.leftAbove(lvl), Refusal{}
	w.lapsing = !proven && e.soon > maxWait
	l.q.push(w)
	l.waiting.Add(1)
	cs.waiting.Add(1)
	// A release may have happened between TryAcquire and the push: it saw
	// no waiter and only decremented. Drain now so that room is not lost.
	l.drainLocked(nil)
	l.queued.Store(l.q.nonZero)
	if w.state != wQueued {
		<-w.ch
		return w, 0, nil
	}
	return w, maxWait, nil
}

// claimKeptLocked grants a request of t (pinned) the permit kept for it,
// if there is one and its class is under its share: it returns the
// waiter, granted (nil when there is none).
func (l *Limiter) claimKeptLocked(now time.Time, qc *queueConf, cs *classState, t *tenant, lvl int, f Flow) *waiter {
	if !l.claimLocked(t) {
		return nil
	}
	if lim := l.limit.Load(); l.inflight.Load() > lim || !takeClass(cs, lim) {
		// The limit fell below it since, or the class is at its share:
		// the permit is given up.
		l.inflight.Add(-1)
		l.drainLocked(nil)
		return nil
	}
	if ok, _ := t.hold(t.capOf(qc.tenantCap), true); !ok { // at its cap: the permit goes to the queue
		cs.inflight.Add(-1)
		l.inflight.Add(-1)
		l.drainLocked(nil)
		return nil
	}
	w := waiterPool.Get().(*waiter)
	w.t, w.cls, w.level, w.enq, w.refusal = t, cs, uint8(lvl), now, Refusal{}
	w.prompt, w.cost = l.flowCost(f)
	w.est, w.told, w.grants, w.lapsing = 0, 0, 0, false
	w.state, w.at, w.inflight = wGranted, now, int(l.inflight.Load())
	return w
}

// displaceLocked pushes v out of the queue to make room; its Acquire
// returns ErrDisplaced.
func (l *Limiter) displaceLocked(qc *queueConf, v *waiter) {
	l.q.remove(v)
	l.waiting.Add(-1)
	v.cls.waiting.Add(-1)
	v.state = wDisplaced
	v.refusal = l.refusalLocked(qc, int(v.level)/2, int(v.level), v.t)
	v.t.unpin()
	v.t.rejected.Add(1)
	v.cls.rejected.Add(1)
	l.displaced.Add(1)
	l.resolveLocked(v)
}

// leave takes w out of the queue because of err (timeout or cancel) and
// reports true, or reports false when w was resolved first.
func (l *Limiter) leave(w *waiter, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.state != wQueued {
		return false
	}
	qc := l.qc.Load()
	lv := &l.q.levels[w.level]
	lv.left++
	lv.leavers.add(l.clock.Now(), w.tag+w.lane.offset)
	w.lane.ended(err == ErrCanceled)
	if len(l.kept) > 0 && l.expireKeptLocked(l.clock.Now(), false) {
		defer l.drainLocked(nil)
	}
	l.q.remove(w)
	l.queued.Store(l.q.nonZero)
	l.waiting.Add(-1)
	w.cls.waiting.Add(-1)
	w.state = wLeft
	w.t.unpin()
	if err == ErrQueueTimeout {
		now := l.clock.Now()
		w.refusal = l.refusalLocked(qc, int(w.level)/2, int(w.level), w.t)
		if w.refusal.RetryAfter == 0 {
			// Nothing measured yet, but no permit came in all the time
			// this request waited: that is the least it would wait again.
			w.refusal.RetryAfter = now.Sub(w.enq)
		}
		w.t.rejected.Add(1)
		w.cls.rejected.Add(1)
		l.rejectedTime.Add(1)
	} else {
		l.canceled.Add(1)
	}
	return true
}

func (l *Limiter) drain(t *tenant) {
	l.mu.Lock()
	l.drainLocked(t)
	l.mu.Unlock()
}

// drainLocked hands free permits to waiters in queue order; t, when not
// nil, released a permit and its lanes blocked by its cap may move again.
func (l *Limiter) drainLocked(t *tenant) {
	if t != nil {
		l.q.unblock(t)
	}
	defer func() {
		l.queued.Store(l.q.nonZero)
		if l.q.n == 0 && len(l.kept) > 0 {
			l.expireKeptLocked(time.Time{}, true) // nobody waits: keeping serves nobody
		}
	}()
	var now time.Time
	for l.q.n > 0 {
		n, ok := l.tryInc()
		if !ok {
			return
		}
		if now.IsZero() {
			now = l.clock.Now()
		}
		w := l.pickLocked(now)
		if w == nil {
			l.inflight.Add(-1)
			return
		}
		l.waiting.Add(-1)
		w.cls.waiting.Add(-1)
		w.state = wGranted
		w.at, w.inflight = now, int(n)
		if w.est > 0 {
			left := l.q.leftAbove(int(w.level)) - w.leftAt + l.q.levels[w.level].leavers.ahead(w.enq, w.served)
			w.cls.calib.observe(now, now.Sub(w.enq), w.est, w.told, w.grants, left)
		}
		l.resolveLocked(w)
	}
}

// resolveLocked wakes the Acquire of w, which was granted or displaced.
// The limiter's resolved hook, set only by simulations that drive the
// queue from one goroutine in virtual time, hears of it first.
func (l *Limiter) resolveLocked(w *waiter) {
	if l.resolved != nil {
		l.resolved(w)
	}
	w.ch <- struct{}{}
}

// pickLocked takes the next waiter to serve out of the queue, with its
// class and tenant permits counted: the first level (in priority order)
// whose class is under its share, and in it the fair queue's next lane
// whose tenant is under its cap. nil when no waiter may be served now.
func (l *Limiter) pickLocked(now time.Time) *waiter {
	qc := l.qc.Load()
	lim := l.limit.Load()
	mask := l.q.nonZero
	for mask != 0 {
		lvl := bits.TrailingZeros32(mask)
		c := lvl / 2
		cs := qc.classes[c]
		if !takeClass(cs, lim) {
			mask &^= 3 << (2 * c)
			continue
		}
		mask &^= 1 << lvl
		lv := &l.q.levels[lvl]
		for ln := lv.serve.top(); ln != nil; ln = lv.serve.top() {
			if ok, _ := ln.t.hold(ln.t.capOf(qc.tenantCap), true); ok {
				return l.q.pop(ln, now)
			}
			l.q.block(ln)
		}
		cs.inflight.Add(-1)
	}
	return nil
}

// MaxWaitFor is how long a request of f may wait for a permit: its
// client's own deadline (f.MaxWait, when set) up to the larger of the
// queue's max_client_wait and max_wait, else the queue's max_wait; and
// no longer than budget (what is left of that deadline after a rate wait;
// negative: no further bound). Acquire and AcquireWithin wait at most this
// long; the proxy lets a paced dispatch wait only for what is left of it.
// Lock-free.
func (l *Limiter) MaxWaitFor(f Flow, budget time.Duration) time.Duration {
	q := &l.set.Load().Queue
	return deadlineOf(q.MaxWait, q.MaxClientWait, f.MaxWait, budget)
}

// deadlineOf is a request's deadline for a permit: its client's own
// (client > 0) capped by the larger of the queue's max_client_wait and
// max_wait, else the queue's max_wait; then no longer than a budget
// (budget >= 0). A client that waits longer than Sluice's default is
// served as long as it waits, since a refusal before its own timeout
// fails a request the provider would have served; the cap bounds what a
// header can ask for.
func deadlineOf(maxWait, maxClientWait, client, budget time.Duration) time.Duration {
	w := maxWait
	if client > 0 {
		w = min(client, max(maxWait, maxClientWait))
	}
	if budget >= 0 && budget < w {
		w = budget
	}
	return w
}

// AcquireWithin is Acquire with the wait bounded by budget as well as by
// f's deadline: what is left of it after the request waited for its rate
// reservation (negative: no further bound). With no budget left, a request
// that finds no permit free is refused at once.
func (l *Limiter) AcquireWithin(now time.Time, f Flow, cancel <-chan struct{}, budget time.Duration, p *Permit) error {
	if budget >= 0 {
		budget = max(budget, time.Nanosecond) // 0 would mean "the queue's max_wait"
		if f.MaxWait <= 0 || budget < f.MaxWait {
			f.MaxWait = budget
		}
	}
	return l.Acquire(now, f, cancel, p)
}
