package adaptive

import (
	"testing"
	"time"
)

// keepHarness: a limit of 4, tenant 1 (light) holds one permit, tenant 2
// (heavy) holds three and has two waiting; every permit has been held a
// second, so a permit is kept for 50 ms.
func keepHarness(t *testing.T) (h *harness, light *hreq, heavy []*hreq) {
	h = newHarness(t, 4, queueSettings(100, time.Minute))
	light = h.arrive(Flow{Tenant: 1})
	for range 3 {
		heavy = append(heavy, h.arrive(Flow{Tenant: 2}))
	}
	h.clk.Advance(time.Second)
	h.finish(heavy[0], 0) // a hold time is known
	heavy = append(heavy[1:], h.arrive(Flow{Tenant: 2}))
	h.poll()
	h.wantState(heavy[2], hHeld, "heavy request on the permit its own tenant freed")
	heavy = append(heavy, h.arrive(Flow{Tenant: 2}), h.arrive(Flow{Tenant: 2}))
	h.wantState(heavy[3], hQueued, "heavy waiter")
	return h, light, heavy
}

// TestKeptPermitGoesToItsTenantsNextRequest: the light tenant's answer
// ends while the heavy one waits; its next request, a moment later, takes
// the permit its answer freed instead of waiting behind the heavy
// tenant's.
func TestKeptPermitGoesToItsTenantsNextRequest(t *testing.T) {
	t.Parallel()
	h, light, heavy := keepHarness(t)
	h.finish(light, 0)
	h.poll()
	h.wantState(heavy[3], hQueued, "heavy waiter while the light tenant's permit is kept")
	if s := h.l.Stats(); s.Kept != 1 || s.Inflight != 3 {
		t.Fatalf("kept %d, in flight %d; want 1 kept, 3 in flight", s.Kept, s.Inflight)
	}
	h.clk.Advance(time.Millisecond)
	next := h.arrive(Flow{Tenant: 1})
	h.wantState(next, hHeld, "light tenant's next request")
	if s := h.l.Stats(); s.Kept != 0 || s.Inflight != 4 {
		t.Fatalf("kept %d, in flight %d; want 0 kept, 4 in flight", s.Kept, s.Inflight)
	}
}

// TestKeptPermitLapsesToTheQueue: not claimed within its moment, the kept
// permit goes to the first waiter at the next event (here the heavy
// waiter's deadline passing for another waiter; an arrival or release
// does it too), and the light tenant's late request waits like anyone.
func TestKeptPermitLapsesToTheQueue(t *testing.T) {
	t.Parallel()
	h, light, heavy := keepHarness(t)
	h.finish(light, 0)
	h.poll()
	h.clk.Advance(keepFor(1) + time.Millisecond)
	late := h.arrive(Flow{Tenant: 3}) // any event after the moment
	h.poll()
	h.wantState(heavy[3], hHeld, "first waiter, once the kept permit lapsed")
	h.wantState(late, hQueued, "newcomer behind the queue")
	if s := h.l.Stats(); s.Kept != 0 || s.Inflight != 4 {
		t.Fatalf("kept %d, in flight %d; want 0 kept, 4 in flight", s.Kept, s.Inflight)
	}
}

// TestNothingKeptWithoutWaiters: with nobody waiting a release frees its
// permit at once, and a kept permit is let go as soon as the queue
// empties, so the limiter's in-flight count always returns to zero.
func TestNothingKeptWithoutWaiters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4, queueSettings(100, time.Minute))
	a, b := h.arrive(Flow{Tenant: 1}), h.arrive(Flow{Tenant: 2})
	h.clk.Advance(time.Second)
	h.finish(a, 0)
	if s := h.l.Stats(); s.Kept != 0 || s.Inflight != 1 {
		t.Fatalf("no waiter: kept %d, in flight %d; want 0, 1", s.Kept, s.Inflight)
	}
	h.finish(b, 0)

	h, light, heavy := keepHarness(t)
	h.finish(light, 0)
	h.poll()
	for _, r := range heavy {
		switch r.state {
		case hQueued:
			h.leave(r, ErrCanceled)
		case hHeld:
			h.finish(r, 0)
		}
		h.poll()
	}
	for _, r := range h.held() {
		h.finish(r, 0)
		h.poll()
	}
	if s := h.l.Stats(); s.Kept != 0 || s.Inflight != 0 || s.Waiting != 0 {
		t.Fatalf("after everything ended: kept %d, in flight %d, waiting %d; want 0", s.Kept, s.Inflight, s.Waiting)
	}
}

// TestKeptPermitGivenUpWhenTheLimitFalls: a limit that fell below what is
// in flight since the permit was kept wins: the light tenant's next
// request waits.
func TestKeptPermitGivenUpWhenTheLimitFalls(t *testing.T) {
	t.Parallel()
	h, light, _ := keepHarness(t)
	h.finish(light, 0)
	h.poll()
	h.setLimit(2)
	next := h.arrive(Flow{Tenant: 1})
	h.wantState(next, hQueued, "light request after the limit fell")
	if s := h.l.Stats(); s.Kept != 0 || s.Inflight != 3 {
		t.Fatalf("kept %d, in flight %d; want 0 kept, 3 in flight", s.Kept, s.Inflight)
	}
}

// TestBusyTenantGetsNoKeptPermit: a tenant at or over an equal split of
// the limit, or with waiters of its own, gets nothing kept: its release
// goes to the queue.
func TestBusyTenantGetsNoKeptPermit(t *testing.T) {
	t.Parallel()
	h, _, heavy := keepHarness(t)
	h.finish(heavy[0], 0)
	h.poll()
	if s := h.l.Stats(); s.Kept != 0 || s.Inflight != 4 {
		t.Fatalf("heavy release: kept %d, in flight %d; want 0 kept, 4 in flight", s.Kept, s.Inflight)
	}
}
