package adaptive

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/settings"
)

// grantOrder releases held permits one at a time (oldest first) until
// nothing waits, and returns the ids of the requests granted, in order.
func grantOrder(h *harness) []int {
	var order []int
	for len(h.queued()) > 0 {
		held := h.held()
		if len(held) == 0 {
			h.t.Fatal("requests wait but none holds a permit")
		}
		h.finish(held[0], 0)
		for _, r := range h.poll() {
			if r.state == hHeld {
				order = append(order, r.id)
			}
		}
	}
	return order
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestQueueStrictPriorityBetweenClasses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, queueSettings(100, time.Minute))
	h.arrive(Flow{Class: clsStandard})
	b := h.arrive(Flow{Class: clsBatch, Tenant: 1})
	s := h.arrive(Flow{Class: clsStandard, Tenant: 2})
	i := h.arrive(Flow{Class: clsInteractive, Tenant: 3})
	sr := h.arrive(Flow{Class: clsStandard, Tenant: 4, Retry: true})
	s2 := h.arrive(Flow{Class: clsStandard, Tenant: 5})
	got := grantOrder(h)
	want := []int{i.id, s.id, s2.id, sr.id, b.id}
	if !equalInts(got, want) {
		t.Fatalf("grant order %v, want %v (interactive, standard first attempts, the standard retry, batch)", got, want)
	}
}

func TestQueueFairBetweenTenantsFIFOWithin(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, queueSettings(100, time.Minute))
	h.arrive(Flow{Tenant: 9})
	var a, b []*hreq
	for range 6 {
		a = append(a, h.arrive(Flow{Tenant: 1, MaxOutput: 100}))
	}
	for range 2 {
		b = append(b, h.arrive(Flow{Tenant: 2, MaxOutput: 100}))
	}
	got := grantOrder(h)
	// Tenant 2 arrived behind six of tenant 1 but shares every round.
	want := []int{a[0].id, b[0].id, a[1].id, b[1].id, a[2].id, a[3].id, a[4].id, a[5].id}
	if !equalInts(got, want) {
		t.Fatalf("grant order %v, want %v", got, want)
	}
}

func TestQueueFairnessCountsTokens(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, queueSettings(1000, time.Minute))
	h.arrive(Flow{Tenant: 9})
	for range 10 {
		h.arrive(Flow{Tenant: 1, MaxOutput: 20000})
	}
	for range 100 {
		h.arrive(Flow{Tenant: 2, MaxOutput: 1000})
	}
	tokens := map[uint64]int{}
	// Serve 10 requests' worth of the big tenant's tokens.
	for tokens[1]+tokens[2] < 200000 {
		h.finish(h.held()[0], 0)
		for _, r := range h.poll() {
			tokens[r.f.Tenant] += r.f.MaxOutput
		}
	}
	if d := tokens[1] - tokens[2]; d > 20000 || d < -20000 {
		t.Fatalf("tokens served: tenant 1 %d, tenant 2 %d; want equal within one large request", tokens[1], tokens[2])
	}
}

func TestQueueSettlementCharges(t *testing.T) {
	t.Parallel()
	// Tenant 1 declares 1000 tokens per request but uses 3000: after
	// settling, it gets about a third of the requests of tenant 2.
	h := newHarness(t, 1, queueSettings(1000, time.Minute))
	h.arrive(Flow{Tenant: 9})
	for range 200 {
		h.arrive(Flow{Tenant: 1, MaxOutput: 1000})
		h.arrive(Flow{Tenant: 2, MaxOutput: 1000})
	}
	n := map[uint64]int{}
	for n[1]+n[2] < 120 {
		held := h.held()[0]
		used := 0
		if held.f.Tenant == 1 {
			used = 3000
		}
		h.finish(held, used)
		for _, r := range h.poll() {
			n[r.f.Tenant]++
		}
	}
	if r := float64(n[2]) / float64(n[1]); r < 2.5 || r > 3.5 {
		t.Fatalf("requests served: tenant 1 %d, tenant 2 %d (ratio %.2f), want about 3", n[1], n[2], r)
	}
}

func TestClassShareCapsFastPath(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4, queueSettings(100, time.Minute))
	b1, b2 := h.arrive(Flow{Class: clsBatch}), h.arrive(Flow{Class: clsBatch})
	h.wantState(b1, hHeld, "batch 1")
	h.wantState(b2, hHeld, "batch 2")
	b3 := h.arrive(Flow{Class: clsBatch})
	h.wantState(b3, hQueued, "batch 3 (batch at 50% of 4)")
	i := h.arrive(Flow{Class: clsInteractive})
	h.wantState(i, hHeld, "interactive while batch waits at its share")
	h.finish(b1, 0)
	h.poll()
	h.wantState(b3, hHeld, "batch 3 after a batch permit was released")
}

func TestSaturationShrinksLowerClasses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 8, queueSettings(100, time.Minute))
	h.setSaturation(1) // TTFT at its baseline: batch may hold 4 of 8
	if c := h.l.Stats().Classes[2]; c.Cap != 4 {
		t.Fatalf("batch cap unsaturated = %d, want 4", c.Cap)
	}
	h.setSaturation(1.5) // halfway to the default ratio 2: share 0.375
	if c := h.l.Stats().Classes[2]; c.Cap != 3 {
		t.Fatalf("batch cap half saturated = %d, want 3", c.Cap)
	}
	h.setSaturation(3)
	st := h.l.Stats()
	if c := st.Classes[2]; c.Cap != 2 || st.Saturation != 1 {
		t.Fatalf("batch cap saturated = %d (saturation %v), want 2 (25%% of 8)", c.Cap, st.Saturation)
	}
	if c := st.Classes[0]; c.Cap != 8 {
		t.Fatalf("interactive cap saturated = %d, want 8", c.Cap)
	}
}

func TestSaturationFromDrops(t *testing.T) {
	t.Parallel()
	now := time.Unix(100, 0)
	cs := control.State{LastDrop: now.Add(-2500 * time.Millisecond)}
	if got := saturation(cs, 2, 10*time.Second, now); got != 0.75 {
		t.Fatalf("saturation 2.5 s after a drop with hold 10 s = %v, want 0.75", got)
	}
	if got := saturation(cs, 2, 2*time.Second, now); got != 0 {
		t.Fatalf("saturation after the hold = %v, want 0", got)
	}
}

func TestFullQueueGivesUpLowestMostRecent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, queueSettings(3, time.Minute))
	h.arrive(Flow{Class: clsStandard})
	b1 := h.arrive(Flow{Class: clsBatch, Tenant: 1})
	b2 := h.arrive(Flow{Class: clsBatch, Tenant: 2})
	s1 := h.arrive(Flow{Class: clsStandard, Tenant: 3})
	b3 := h.arrive(Flow{Class: clsBatch, Tenant: 4})
	h.wantState(b3, hRefused, "batch newcomer to a full queue")
	if !errors.Is(b3.err, ErrQueueFull) {
		t.Fatalf("batch newcomer: %v, want ErrQueueFull", b3.err)
	}
	i := h.arrive(Flow{Class: clsInteractive, Tenant: 5})
	h.wantState(i, hQueued, "interactive newcomer to a full queue")
	h.poll()
	h.wantState(b2, hRefused, "most recent batch waiter")
	if !errors.Is(b2.err, ErrDisplaced) {
		t.Fatalf("displaced waiter: %v, want ErrDisplaced", b2.err)
	}
	h.wantState(b1, hQueued, "older batch waiter")
	h.wantState(s1, hQueued, "standard waiter")
	if s := h.l.Stats(); s.Displaced != 1 || s.RejectedFull != 1 || s.Waiting != 3 {
		t.Fatalf("stats: displaced %d, full %d, waiting %d; want 1 1 3", s.Displaced, s.RejectedFull, s.Waiting)
	}
}

func TestRetriesShedBeforeFirstAttempts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, queueSettings(2, time.Minute))
	h.arrive(Flow{})
	r1 := h.arrive(Flow{Tenant: 1, Retry: true})
	f1 := h.arrive(Flow{Tenant: 2})
	f2 := h.arrive(Flow{Tenant: 3})
	h.poll()
	h.wantState(r1, hRefused, "retry waiter, when a first attempt of its class arrives at a full queue")
	h.wantState(f1, hQueued, "first attempt")
	h.wantState(f2, hQueued, "newer first attempt")
	r2 := h.arrive(Flow{Tenant: 4, Retry: true})
	h.wantState(r2, hRefused, "retry newcomer to a queue full of first attempts")
}

func TestEarlyRejectionFromEstimate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2, queueSettings(100, time.Minute))
	// Tenant 1 keeps a backlog of nine that drains at 2 permits per
	// second (each held 1 s). Every request served waited behind nine
	// grants, and its wait was what its estimate said: after
	// calibMinSamples of them the estimate has proven itself.
	h.arrive(Flow{Tenant: 9})
	h.arrive(Flow{Tenant: 9})
	backlog := func(n int) {
		for len(h.queued()) < n {
			h.arrive(Flow{Tenant: 1, MaxOutput: 100, MaxWait: time.Minute})
		}
	}
	early := func() *hreq { return h.arrive(Flow{Tenant: 1, MaxOutput: 100, MaxWait: 2 * time.Second}) }
	drain := func(grants int) {
		for range grants {
			h.clk.Advance(500 * time.Millisecond)
			h.finish(h.held()[0], 0)
			h.poll()
			backlog(9)
		}
	}
	backlog(9)
	drain(2) // hold times known: an estimate exists, unproven
	if r := early(); r.state != hQueued {
		t.Fatalf("refused before the estimate proved itself: %v", r.err)
	}
	drain(calibMinSamples + 12)
	if c := h.l.Stats().Classes[1].Calibration; !c.Calibrated || c.P50 < 0.8 || c.P50 > 1.25 {
		t.Fatalf("calibration %+v: want calibrated, median ratio about 1", c)
	}
	// Nine ahead in the lane, 2 grants a second: about 5 s.
	r := early()
	h.wantState(r, hRefused, "request whose estimated wait exceeds its deadline")
	if !errors.Is(r.err, ErrDeadline) {
		t.Fatalf("err = %v, want ErrDeadline", r.err)
	}
	ref := r.p.Refusal()
	if ref.RetryAfter < 4*time.Second || ref.RetryAfter > 6*time.Second || ref.OverShare {
		t.Fatalf("refusal = %+v, want RetryAfter about 5s, provider full", ref)
	}
	// A new tenant goes to the front of the same class: it fits.
	n := h.arrive(Flow{Tenant: 2, MaxOutput: 100, MaxWait: 2 * time.Second})
	h.wantState(n, hQueued, "new tenant with the same deadline")
	if s := h.l.Stats(); s.RejectedDeadline != 1 {
		t.Fatalf("RejectedDeadline = %d, want 1", s.RejectedDeadline)
	}
}

func TestRefusalOverShareWhenProviderHasRoom(t *testing.T) {
	t.Parallel()
	q := queueSettings(0, time.Minute) // no queue: every refusal is immediate
	h := newHarness(t, 4, q)
	h.arrive(Flow{Class: clsBatch})
	h.arrive(Flow{Class: clsBatch})
	r := h.arrive(Flow{Class: clsBatch})
	if !errors.Is(r.err, ErrQueueFull) || !r.p.Refusal().OverShare {
		t.Fatalf("batch over its share with 2 of 4 permits free: err %v, refusal %+v; want over share", r.err, r.p.Refusal())
	}
	h.arrive(Flow{})
	h.arrive(Flow{})
	r = h.arrive(Flow{})
	if !errors.Is(r.err, ErrQueueFull) || r.p.Refusal().OverShare {
		t.Fatalf("provider full: err %v, refusal %+v; want not over share", r.err, r.p.Refusal())
	}
}

func TestTenantConcurrencyCap(t *testing.T) {
	t.Parallel()
	q := queueSettings(100, time.Minute)
	q.TenantMaxInflight = 2
	h := newHarness(t, 10, q)
	a1, a2, a3 := h.arrive(Flow{Tenant: 1}), h.arrive(Flow{Tenant: 1}), h.arrive(Flow{Tenant: 1})
	h.wantState(a1, hHeld, "tenant's first")
	h.wantState(a2, hHeld, "tenant's second")
	h.wantState(a3, hQueued, "tenant's third over its cap of 2")
	b := h.arrive(Flow{Tenant: 2})
	h.wantState(b, hHeld, "another tenant")
	h.finish(a1, 0)
	h.poll()
	h.wantState(a3, hHeld, "tenant's third once one of its permits ended")
}

func TestTenantTableBounded(t *testing.T) {
	t.Parallel()
	q := queueSettings(100, time.Minute)
	q.MaxTenants = 2
	h := newHarness(t, 10, q)
	a, b := h.arrive(Flow{Tenant: 1, MaxOutput: 5}), h.arrive(Flow{Tenant: 2, MaxOutput: 5})
	c := h.arrive(Flow{Tenant: 3, MaxOutput: 7})
	h.wantState(c, hHeld, "third tenant")
	if got := c.p.t.id; got != OtherTenant {
		t.Fatalf("third tenant with two busy tracked: counted as %x, want OtherTenant", got)
	}
	h.finish(a, 0)
	h.finish(b, 0)
	// Tenants 1 and 2 are idle now; one is forgotten for tenant 4 (on the
	// CLOCK's second pass: both were requested recently).
	d := h.arrive(Flow{Tenant: 4})
	if d.p.t.id != 4 {
		t.Fatalf("new tenant with idle ones tracked: counted as %x, want 4", d.p.t.id)
	}
	h.finish(c, 0)
	st := h.l.Stats()
	if st.TenantsTracked != 2 {
		t.Fatalf("tenants tracked = %d, want 2", st.TenantsTracked)
	}
	for _, ts := range st.Tenants {
		if ts.Tenant == OtherTenant && ts.Tokens != 7 {
			t.Fatalf("other tenant tokens = %d, want 7", ts.Tokens)
		}
	}
}

func TestReconfigureMovesWaitersByClassName(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, queueSettings(100, time.Minute))
	h.arrive(Flow{})
	b := h.arrive(Flow{Class: clsBatch, Tenant: 1})
	s := h.arrive(Flow{Class: clsStandard, Tenant: 2})
	set := *h.l.set.Load()
	set.Queue.Classes = []settings.Class{
		{Name: "batch", MaxShare: 1, SaturatedShare: 1}, // now the top class
		{Name: "standard", MaxShare: 1, SaturatedShare: 1},
	}
	h.l.reconfigure(set, nil)
	if got, want := grantOrder(h), []int{b.id, s.id}; !equalInts(got, want) {
		t.Fatalf("grant order after reordering the classes: %v, want %v", got, want)
	}
	if st := h.l.Stats(); len(st.Classes) != 2 || st.Classes[0].Name != "batch" {
		t.Fatalf("classes after reload: %+v", st.Classes)
	}
}

// TestTenantIndexUnderChurn: tenants come and go through a small table;
// the lock-free index always finds exactly the tracked tenants, and the
// table never tracks more than its bound.
func TestTenantIndexUnderChurn(t *testing.T) {
	t.Parallel()
	tt := newTenantTable(50)
	rng := rand.New(rand.NewPCG(3, 3))
	held := map[uint64]*tenant{}
	for i := range 20000 {
		id := uint64(rng.IntN(400))
		if tn, ok := held[id]; ok && rng.IntN(2) == 0 {
			tn.unhold()
			delete(held, id)
			continue
		}
		tn := tt.get(id)
		if ok, dead := tn.hold(0, false); !ok || dead {
			continue
		}
		if _, ok := held[id]; ok || tn.id == OtherTenant {
			tn.unhold()
		} else {
			held[id] = tn
		}
		if i%1000 == 0 {
			tt.setMax(40 + rng.IntN(30))
		}
	}
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if len(tt.slots) > 70 {
		t.Fatalf("%d tenants tracked, bound at most 70", len(tt.slots))
	}
	for i, tn := range tt.slots {
		if tn.slot != i || tt.ix.Load().find(tn.id) != tn {
			t.Fatalf("tracked tenant %d (slot %d at %d) not found by the index", tn.id, tn.slot, i)
		}
	}
	for id, tn := range held {
		if tt.ix.Load().find(id) != tn {
			t.Fatalf("tenant %d holds a permit but is not in the index", id)
		}
	}
}
