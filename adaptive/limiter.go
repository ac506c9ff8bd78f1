package adaptive

import (
	"math"
	"reflect"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/settings"
)

// Limiter admits requests for one provider: at most min(limit, ceiling)
// permits are in use at once, and further requests wait in a bounded,
// priority-ordered and fair queue (fairq.go) until a permit is released,
// the limit rises, their deadline passes, or they are canceled.
//
// Admission on the fast path is lock-free: a few atomic loads and three
// CAS (the tenant's permits, the class's share, the provider's in-flight
// count). The queue's mutex is taken only when a request has to wait, or
// when a permit is released while somebody waits.
type Limiter struct {
	inflight atomic.Int64
	limit    atomic.Int64 // effective: min(controller limit, ceiling)
	ceiling  atomic.Int64
	waiting  atomic.Int64  // waiters, readable without the lock
	queued   atomic.Uint32 // bit per queue level with waiters (fairQueue.nonZero)

	ctrl  atomic.Pointer[ctrlBox]
	set   atomic.Pointer[LimiterSettings] // in force; for Stats
	qc    atomic.Pointer[queueConf]
	clock control.Clock

	tenants *tenantTable
	shareAt atomic.Int64  // unix ns of the last share refresh
	sat     atomic.Uint64 // float64 bits: saturation, 0..1

	mu         sync.Mutex
	q          fairQueue
	resolved   func(*waiter) // nil; see resolveLocked
	limHigh    recentMax     // the limit, seen by estimates
	limLow     recentMax     // minus the limit, seen by estimates
	kept       []keptSlot    // released permits kept for their tenants (keep.go)
	keepOff    bool          // tests of the queue's order alone turn keeping off
	keptN      atomic.Int32
	maxWaiting int
	maxWait    time.Duration
	clientWait time.Duration // the queue's max_client_wait

	// counters for metrics; monotonic. Grants are counted per class (on
	// the fast path, a counter shared by the whole provider would be one
	// more contended cache line); retired holds the grants of classes a
	// reload removed.
	retired       atomic.Uint64
	rejectedFull  atomic.Uint64
	rejectedTime  atomic.Uint64
	rejectedEarly atomic.Uint64
	displaced     atomic.Uint64
	canceled      atomic.Uint64
	waitedTotalNs atomic.Int64
	drops         [control.NumDropKinds]atomic.Uint64 // drops fed to the controller, by kind
	// decoding counts the held permits past their first token
	// (Sample.Decoding); written at first tokens and ends, not on
	// admission, so it stays off the admission fields' cache line.
	decoding atomic.Int64
	// output is the smoothed number of tokens the requests that ended
	// used beyond their prompt estimate: what a request is expected to
	// produce (flowCost). 0 until one ended.
	output smoothed
	fleet  fleetHooks // external cap and lease source (fleet.go, lease.go)
}

// ctrlBox holds a controller and, when it can pace dispatches, the same
// controller as a Pacer, resolved once when the controller is installed
// so that an attempt does not assert its type.
type ctrlBox struct {
	c control.Controller
	p Pacer // nil: c does not pace
}

func newCtrlBox(c control.Controller) *ctrlBox {
	p, _ := c.(Pacer)
	return &ctrlBox{c: c, p: p}
}

// Controller returns the controller the limiter admits through.
func (l *Limiter) Controller() control.Controller {
	if b := l.ctrl.Load(); b != nil {
		return b.c
	}
	return nil
}

var waiterPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{ch: make(chan struct{}, 1), timer: t}
}}

// newLimiter returns a Limiter for set, admitting through ctrl. Limiters
// are built, kept across reloads and retired by a Registry.
func newLimiter(set LimiterSettings, ctrl control.Controller, clk control.Clock) *Limiter {
	if clk == nil {
		clk = SystemClock{}
	}
	l := &Limiter{clock: clk, tenants: newTenantTable(set.Queue.MaxTenants)}
	l.reconfigure(set, ctrl)
	return l
}

// reconfigure applies new settings to a live limiter. Permits in use and
// waiters are kept: a lower ceiling lets no new request in until enough
// streams end; a higher one (or a new controller with a higher limit)
// admits waiters at once. When the classes change, waiters move to the
// class of the same name (else the default class), in arrival order. A nil
// ctrl keeps the current one.
func (l *Limiter) reconfigure(set LimiterSettings, ctrl control.Controller) {
	if set.Limit.Ceiling < 1 {
		panic("adaptive: ceiling must be >= 1")
	}
	if len(set.Queue.Classes) == 0 {
		set.Queue.Classes = []settings.Class{{Name: "default", MaxShare: 1, SaturatedShare: 1}}
		set.Queue.DefaultClass = "default"
	}
	if ctrl != nil {
		l.ctrl.Store(newCtrlBox(ctrl))
	}
	prev := l.set.Load()
	changed := prev == nil || prev.Limit != set.Limit || !reflect.DeepEqual(prev.Queue, set.Queue)
	l.set.Store(&set)
	l.tenants.setMax(max(set.Queue.MaxTenants, 1))
	l.mu.Lock()
	old := l.qc.Load()
	qc := newQueueConf(set.Queue, old)
	l.qc.Store(qc)
	l.maxWaiting = set.Queue.MaxWaiting
	l.maxWait = set.Queue.MaxWait
	l.clientWait = set.Queue.MaxClientWait
	switch {
	case old == nil:
		l.q.reset(2 * len(qc.classes))
	case !qc.sameClasses(old):
		l.rehomeLocked(qc)
		for _, c := range old.classes {
			if !slices.Contains(qc.classes, c) {
				l.retired.Add(c.admitted.Load())
			}
		}
	case qc.tenantCap != old.tenantCap:
		for _, w := range l.q.all() {
			l.q.unblock(w.t)
		}
	}
	// The waits measured so far were under the old settings: the
	// estimate proves itself again before it refuses anybody, so that a
	// reload never refuses a request the old settings would have served.
	if changed {
		for _, c := range qc.classes {
			c.calib.reset()
		}
	}
	l.queued.Store(l.q.nonZero)
	l.mu.Unlock()
	l.refreshShares(l.clock.Now(), true)
	l.ceiling.Store(int64(set.Limit.Ceiling))
	l.setLimit(l.controllerLimit())
	if l.waiting.Load() > 0 {
		l.drain(nil)
	}
}

// rehomeLocked moves every waiter to the levels of qc: the class of the
// same name, else the default class; retries stay retries. Under l.mu.
func (l *Limiter) rehomeLocked(qc *queueConf) {
	ws := l.q.all()
	sort.Slice(ws, func(i, j int) bool { return ws[i].seq < ws[j].seq })
	for _, w := range ws {
		w.t.lanes = nil
	}
	l.q.reset(2 * len(qc.classes))
	for _, w := range ws {
		c := qc.def
		for i, cs := range qc.classes {
			if cs == w.cls {
				c = i
			}
		}
		w.cls.waiting.Add(-1)
		w.cls = qc.classes[c]
		w.cls.waiting.Add(1)
		w.level = uint8(levelOf(c, w.level%2 == 1))
		l.q.push(w)
	}
}

func (l *Limiter) controllerLimit() int64 {
	if b := l.ctrl.Load(); b != nil {
		return int64(b.c.Limit())
	}
	return math.MaxInt64
}

// setLimit stores min(want, ceiling, fleet cap) and, when room appeared, admits waiters.
func (l *Limiter) setLimit(want int64) {
	c := l.fleet.bound(l.ceiling.Load())
	if want > c {
		want = c
	}
	if want < 1 {
		want = 1
	}
	old := l.limit.Swap(want)
	if want > old && l.waiting.Load() > 0 {
		l.drain(nil)
	}
}

// TryAcquire grants p to a request of flow f without waiting, or reports
// false. It never jumps the queue: while requests of f's level or a higher
// one wait, f must wait too (requests of lower levels do not hold it
// back). It also refuses when f's class is at its share of the limit or
// f's tenant at its cap. now is the caller's current time (the proxy reads
// the clock once per request and passes it down), recorded as the permit's
// grant time. p must not be held.
func (l *Limiter) TryAcquire(now time.Time, f Flow, p *Permit) bool {
	qc := l.qc.Load()
	c := qc.classOf(f.Class)
	lvl := levelOf(c, f.Retry)
	if l.queued.Load()&(1<<(lvl+1)-1) != 0 {
		return false
	}
	lim := l.limit.Load()
	if l.inflight.Load() >= lim {
		return false
	}
	var t *tenant
	for {
		t = l.tenants.get(f.Tenant)
		t.setCap(f.MaxInflight)
		ok, dead := t.hold(t.capOf(qc.tenantCap), false)
		if ok {
			break
		}
		if !dead {
			return false
		}
	}
	cs := qc.classes[c]
	if !takeClass(cs, lim) {
		l.undo(t, nil)
		return false
	}
	n, ok := l.tryInc()
	if !ok {
		l.undo(t, cs)
		return false
	}
	prompt, cost := l.flowCost(f)
	l.counted(cs, 0)
	p.grant(l, now, int(n), 0, t, cs, uint8(lvl), prompt, cost)
	return true
}

// undo gives back what a refused fast path took; a waiter refused in the
// meantime because of it is admitted now.
func (l *Limiter) undo(t *tenant, cs *classState) {
	if cs != nil {
		cs.inflight.Add(-1)
	}
	t.unhold()
	if l.waiting.Load() > 0 {
		l.drain(t)
	}
}

// flowCost is the token cost a request of f is queued and charged with
// until it ends, and its prompt part: the prompt estimate plus the output
// the provider's requests have been producing (output), or the
// request's own bound when that is lower. A max_tokens is a bound, not a
// forecast (clients set it generously), and a request without one would
// otherwise need a guess: before the first request ended, the bound, or
// DefaultOutputEstimate without one. Each request's cost is settled to
// its actual usage when it ends (release); the closer the estimate, the
// less the fair queue's order depends on that settlement.
func (l *Limiter) flowCost(f Flow) (prompt, cost int64) {
	out := int64(f.MaxOutput)
	if learned := l.output.load(); learned > 0 {
		if out <= 0 || int64(learned) < out {
			out = int64(learned)
		}
	} else if out <= 0 {
		out = DefaultOutputEstimate
	}
	prompt = int64(max(f.Prompt, 0))
	return prompt, max(prompt+out, 1)
}

// DefaultOutputEstimate is the output a request without a bound is
// assumed to produce before any request of its provider has ended.
const DefaultOutputEstimate = 1000

// counted records a grant in the counters.
func (l *Limiter) counted(cs *classState, waited time.Duration) {
	cs.admitted.Add(1)
	if waited > 0 {
		l.waitedTotalNs.Add(int64(waited))
		cs.waitedNs.Add(int64(waited))
	}
}

// tryInc takes a permit if in-flight is below the effective limit.
func (l *Limiter) tryInc() (int64, bool) {
	for {
		n := l.inflight.Load()
		if n >= l.limit.Load() {
			return 0, false
		}
		if l.inflight.CompareAndSwap(n, n+1) {
			return n + 1, true
		}
	}
}

// release returns p's slot at now (Permit.Finish calls it, once) and
// settles the request's cost: tokens > 0 is its actual usage. If requests
// wait, the freed slot goes to the first of them in queue order.
func (l *Limiter) release(p *Permit, now time.Time, tokens int) {
	if !p.granted.IsZero() {
		p.cls.holdTime.observe(now.Sub(p.granted).Seconds(), holdAlpha)
	}
	var d int64
	if tokens > 0 {
		d = int64(tokens) - p.cost
		p.t.tokens.Add(uint64(tokens))
		l.output.observe(float64(max(int64(tokens)-p.prompt, 1)), outputAlpha)
	} else {
		p.t.tokens.Add(uint64(p.cost))
	}
	p.cls.inflight.Add(-1)
	p.t.unhold()
	if l.waiting.Load() == 0 {
		if l.inflight.Add(-1) < 0 {
			panic("adaptive: permit released more often than granted")
		}
		if d != 0 {
			p.t.debt.Add(d)
		}
		if l.keptN.Load() > 0 {
			l.mu.Lock()
			if l.q.n == 0 {
				l.expireKeptLocked(now, true) // nobody waits: keeping serves nobody
			}
			l.mu.Unlock()
		}
		return
	}
	// Shares follow saturation even when no sample or arrival comes: a
	// class held back by a drop gets its share back as the drop fades.
	l.refreshShares(now, false)
	l.mu.Lock()
	l.expireKeptLocked(now, false)
	if !l.keepLocked(p.t, now, p.cls.hold(l.qc.Load().classes)) && l.inflight.Add(-1) < 0 {
		panic("adaptive: permit released more often than granted")
	}
	if d != 0 {
		l.q.settle(p.t, int(p.level), d)
	}
	l.drainLocked(p.t)
	l.mu.Unlock()
}

// holdAlpha smooths permit hold times (about the last 20 requests), and
// outputAlpha the output of the requests that ended with a known usage.
const holdAlpha, outputAlpha = 0.05, 0.05

// observe feeds a sample about the request holding p to the controller
// and applies the controller's new limit and the class shares that follow
// from its state. Dispatched and InflightAtDispatch are taken from p; Now
// defaults to the limiter's clock.
func (l *Limiter) observe(p *Permit, s control.Sample) {
	if s.Kind == control.Dropped && s.Drop < control.NumDropKinds {
		l.drops[s.Drop].Add(1)
	}
	b := l.ctrl.Load()
	if b == nil {
		return
	}
	s.Dispatched = p.sent
	s.InflightAtDispatch = p.inflight
	s.Decoding = int(l.decoding.Load())
	if s.Now.IsZero() {
		s.Now = l.clock.Now()
	}
	l.setLimit(int64(b.c.Observe(s)))
	if l.refreshShares(s.Now, s.Kind == control.Dropped) && l.waiting.Load() > 0 {
		l.drain(nil)
	}
}
