package adaptive

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestQueueProperties drives limiters through many random interleavings in
// virtual time (arrivals of every class, tenant, cost and deadline, retries,
// releases with settled usage, timeouts, cancellations, limit changes,
// saturation changes, tenant caps, a full queue) and checks after every
// step that:
//
//   - no waiter is lost: every request is granted, refused or canceled
//     exactly once, and the limiter's counts match the requests' states;
//   - the queue is work-conserving: no waiter is left that could be
//     granted (provider, class and tenant all have room);
//   - priorities and fairness hold: a released permit goes to the waiter
//     an independent scan picks (first level whose class has room, then
//     the smallest start tag among tenants under their cap, FIFO within a
//     tenant);
//   - shares hold: a grant never takes a class past its share of the
//     limit, a tenant past its cap, or the provider past its limit;
//   - a full queue gives up the waiter it would serve last (lowest level,
//     largest start tag), and only for a newcomer that ranks above it.
func TestQueueProperties(t *testing.T) {
	t.Parallel()
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runQueueProperties(t, uint64(seed))
		})
	}
}

func runQueueProperties(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 12))
	q := queueSettings(5+rng.IntN(30), time.Duration(1+rng.IntN(20))*time.Second)
	if rng.IntN(2) == 0 {
		q.TenantMaxInflight = 1 + rng.IntN(3)
	}
	q.MaxTenants = 3 + rng.IntN(6)
	h := newHarness(t, 1+rng.IntN(8), q)
	// The order of the queue alone: a released permit is not kept for
	// its tenant (keep_test.go tests that).
	h.l.keepOff = true
	for step := range 1500 {
		h.step++
		h.clk.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
		switch op := rng.IntN(100); {
		case op < 45:
			h.checkArrival(randomFlow(rng))
		case op < 80:
			if held := h.held(); len(held) > 0 {
				h.checkRelease(held[rng.IntN(len(held))], rng.IntN(3)*rng.IntN(30000))
			}
		case op < 85:
			if qd := h.queued(); len(qd) > 0 {
				h.leave(qd[rng.IntN(len(qd))], ErrCanceled)
			}
		case op < 93:
			h.setLimit(1 + rng.IntN(10))
		default:
			h.setSaturation(0.5 + 2*rng.Float64())
		}
		h.poll()
		h.expire()
		h.checkInvariants(fmt.Sprintf("seed %d step %d", seed, step))
	}
	// Drain: release everything; every waiter ends.
	for len(h.queued()) > 0 || len(h.held()) > 0 {
		h.step++
		h.clk.Advance(100 * time.Millisecond)
		if held := h.held(); len(held) > 0 {
			h.checkRelease(held[0], 0)
		}
		h.poll()
		h.expire()
		h.checkInvariants("drain")
	}
	st := h.l.Stats()
	if st.Inflight != 0 || st.Waiting != 0 {
		t.Fatalf("after drain: inflight %d waiting %d", st.Inflight, st.Waiting)
	}
	for _, c := range st.Classes {
		if c.Inflight != 0 || c.Waiting != 0 {
			t.Fatalf("after drain: class %s inflight %d waiting %d", c.Name, c.Inflight, c.Waiting)
		}
	}
	h.l.tenants.each(func(tn *tenant) {
		if w := tn.word.Load(); w != 0 && w != -1 {
			t.Fatalf("after drain: tenant %x word %x", tn.id, w)
		}
	})
	for _, r := range h.reqs {
		if r.ends != 1 {
			t.Fatalf("request %d ended %d times (state %d)", r.id, r.ends, r.state)
		}
	}
}

func randomFlow(rng *rand.Rand) Flow {
	f := Flow{
		Tenant:    uint64(rng.IntN(12)),
		Class:     uint8(rng.IntN(4)), // 0: the default class
		MaxOutput: 1 + rng.IntN(20000),
		Retry:     rng.IntN(5) == 0,
	}
	if rng.IntN(3) == 0 {
		f.MaxWait = time.Duration(1+rng.IntN(5000)) * time.Millisecond
	}
	return f
}

// rank is a waiter's place in the queue as an independent scan sees it.
type rank struct {
	level int
	tag   float64
	seq   uint64
}

func (a rank) before(b rank) bool {
	if a.level != b.level {
		return a.level < b.level
	}
	if a.tag != b.tag {
		return a.tag < b.tag
	}
	return a.seq < b.seq
}

func rankOf(w *waiter) rank {
	return rank{int(w.level), w.tag + w.lane.offset, w.seq}
}

// grantable reports whether w could take a permit now, releasing extra
// (a class and tenant that are about to give one back) first.
func (h *harness) grantable(w *waiter, relCls *classState, relT *tenant) bool {
	l := h.l
	lim := l.limit.Load()
	in := l.inflight.Load()
	cin := w.cls.inflight.Load()
	tin := w.t.held()
	if relCls != nil {
		in--
		if relCls == w.cls {
			cin--
		}
		if relT == w.t {
			tin--
		}
	}
	qc := l.qc.Load()
	return in < lim && cin < classCap(w.cls, lim) && (qc.tenantCap == 0 || tin < qc.tenantCap)
}

// expectedGrants are the waiters a release of r's permit should grant,
// by a linear scan that shares no code with the queue: with r's permit
// back, repeatedly the best-ranked waiter whose provider, class and tenant
// all have room. (One release can admit two waiters: one held back by its
// class's share and one by its tenant's cap, when r's permit counted for
// both and a permit was already free.)
func (h *harness) expectedGrants(r *hreq) map[*hreq]bool {
	l := h.l
	qc := l.qc.Load()
	lim := l.limit.Load()
	in := l.inflight.Load() - 1
	cls := map[*classState]int64{}
	ten := map[*tenant]int64{}
	for _, c := range qc.classes {
		cls[c] = c.inflight.Load()
	}
	cls[r.p.cls]--
	count := func(t *tenant) int64 {
		if _, ok := ten[t]; !ok {
			ten[t] = t.held()
			if t == r.p.t {
				ten[t]--
			}
		}
		return ten[t]
	}
	want := map[*hreq]bool{}
	for in < lim {
		var best *hreq
		var bestRank rank
		for _, q := range h.queued() {
			w := q.w
			if want[q] || cls[w.cls] >= classCap(w.cls, lim) || (qc.tenantCap > 0 && count(w.t) >= qc.tenantCap) {
				continue
			}
			if rk := rankOf(w); best == nil || rk.before(bestRank) {
				best, bestRank = q, rk
			}
		}
		if best == nil {
			break
		}
		want[best] = true
		in++
		cls[best.w.cls]++
		ten[best.w.t] = count(best.w.t) + 1
	}
	return want
}

// checkRelease finishes r and checks that the freed permit went to the
// waiters an independent scan picks.
func (h *harness) checkRelease(r *hreq, tokens int) {
	h.t.Helper()
	// Settlement moves the tags of r's tenant: the expectation is only
	// taken on the unsettled path (tokens 0).
	var want map[*hreq]bool
	if tokens == 0 {
		want = h.expectedGrants(r)
	}
	h.finish(r, tokens)
	var granted []*hreq
	for _, g := range h.poll() {
		if g.state == hHeld {
			granted = append(granted, g)
		}
	}
	if tokens != 0 {
		return
	}
	ok := len(granted) == len(want)
	for _, g := range granted {
		ok = ok && want[g]
	}
	if !ok {
		var ws []*hreq
		for q := range want {
			ws = append(ws, q)
		}
		for _, q := range granted {
			h.t.Logf("granted %d flow %+v tenant %x cls %s", q.id, q.f, q.p.t.id, q.p.cls.name)
		}
		for _, q := range h.queued() {
			h.t.Logf("queued %d flow %+v level %d tag %v seq %d t %x held %d blocked %v", q.id, q.f, q.w.level, q.w.tag+q.w.lane.offset, q.w.seq, q.w.t.id, q.w.t.held(), q.w.lane.blocked)
		}
		h.t.Logf("released %d flow %+v", r.id, r.f)
		h.t.Fatalf("release of %d granted %v, want %v", r.id, ids(granted), ids(ws))
	}
}

// checkArrival sends a request of f and checks how a full queue treated
// it: the waiter it may give up is, of the last level with waiters, the
// one with the largest start tag (served last), and the newcomer is
// refused only when it would be served after that one.
func (h *harness) checkArrival(f Flow) {
	h.t.Helper()
	var victim *hreq
	var vr rank
	full := int(h.l.waiting.Load()) >= h.l.maxWaiting
	lvl := levelOf(h.l.qc.Load().classOf(f.Class), f.Retry)
	var tag float64
	if full {
		for _, q := range h.queued() {
			if rk := rankOf(q.w); victim == nil || vr.before(rk) {
				victim, vr = q, rk
			}
		}
		h.l.mu.Lock()
		tag = h.l.q.startTag(h.l.tenants.get(f.Tenant), lvl)
		h.l.mu.Unlock()
	}
	r := h.arrive(f)
	if !full || victim == nil {
		return
	}
	newcomerFirst := lvl < vr.level || (lvl == vr.level && tag < vr.tag)
	switch {
	case errors.Is(r.err, ErrQueueFull) && newcomerFirst:
		h.t.Fatalf("newcomer (level %d, tag %v) refused by a full queue whose last waiter is level %d, tag %v", lvl, tag, vr.level, vr.tag)
	case r.state == hQueued:
		if !newcomerFirst {
			h.t.Fatalf("newcomer (level %d, tag %v) queued in a full queue although it ranks after level %d, tag %v", lvl, tag, vr.level, vr.tag)
		}
		h.poll()
		if victim.state == hQueued {
			h.t.Fatalf("newcomer queued in a full queue, but the last waiter %d was not displaced", victim.id)
		}
	}
}

// checkInvariants checks that counts match and nothing grantable waits.
func (h *harness) checkInvariants(where string) {
	h.t.Helper()
	l := h.l
	var queued, held int
	for _, r := range h.reqs {
		switch r.state {
		case hQueued:
			queued++
			if h.grantable(r.w, nil, nil) {
				h.t.Fatalf("%s: request %d (flow %+v) waits although it could be granted", where, r.id, r.f)
			}
		case hHeld:
			held++
		}
		if r.ends > 1 {
			h.t.Fatalf("%s: request %d ended %d times", where, r.id, r.ends)
		}
	}
	if int(l.waiting.Load()) != queued || l.q.n != queued {
		h.t.Fatalf("%s: limiter waiting %d (queue %d), requests queued %d", where, l.waiting.Load(), l.q.n, queued)
	}
	if int(l.inflight.Load()) != held {
		h.t.Fatalf("%s: limiter inflight %d, requests held %d", where, l.inflight.Load(), held)
	}
	if l.queued.Load() != l.q.nonZero {
		h.t.Fatalf("%s: published level mask %b, queue %b", where, l.queued.Load(), l.q.nonZero)
	}
	h.checkGrantBounds(where)
}

// checkGrantBounds checks that every permit granted since the last check
// stayed within the limit, its class's share and its tenant's cap at the
// time it was granted.
func (h *harness) checkGrantBounds(where string) {
	h.t.Helper()
	qc := h.l.qc.Load()
	lim := h.l.limit.Load()
	perClass := map[*classState]int64{}
	perTenant := map[*tenant]int64{}
	for _, r := range h.reqs {
		if r.state != hHeld {
			continue
		}
		perClass[r.p.cls]++
		perTenant[r.p.t]++
		if r.gstep == h.step && int64(r.p.Inflight()) > lim {
			h.t.Fatalf("%s: request %d granted as number %d with limit %d", where, r.id, r.p.Inflight(), lim)
		}
	}
	for _, r := range h.reqs {
		if r.state != hHeld || r.gstep != h.step {
			continue
		}
		if n, c := perClass[r.p.cls], classCap(r.p.cls, lim); n > c {
			h.t.Fatalf("%s: request %d granted into class %s holding %d, over its cap %d", where, r.id, r.p.cls.name, n, c)
		}
		if qc.tenantCap > 0 && perTenant[r.p.t] > qc.tenantCap {
			h.t.Fatalf("%s: request %d granted to tenant %x holding %d, over its cap %d", where, r.id, r.p.t.id, perTenant[r.p.t], qc.tenantCap)
		}
	}
}

func ids(rs []*hreq) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.id
	}
	return out
}
