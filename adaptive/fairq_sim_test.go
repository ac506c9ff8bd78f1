package adaptive

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// simFlow is one source of traffic in a queue simulation: Poisson
// arrivals of one flow, each holding its permit for hold(cost).
type simFlow struct {
	f    Flow
	rate float64 // arrivals per second
	// counted over the measured period
	offered, admitted, tokens int
}

// runQueueSim runs flows against a limiter of the given limit in virtual
// time, in steps of 5 ms, for warm+measure, and counts each flow's
// arrivals, grants and granted tokens during measure. hold gives a
// request's permit hold time from its cost.
func runQueueSim(t *testing.T, limit int, q QueueSettings, flows []*simFlow, hold func(cost int) time.Duration, warm, measure time.Duration) *harness {
	t.Helper()
	h := newHarness(t, limit, q)
	rng := rand.New(rand.NewPCG(7, 7))
	const tick = 5 * time.Millisecond
	next := make([]time.Duration, len(flows))
	for i, fl := range flows {
		next[i] = time.Duration(rng.ExpFloat64() / fl.rate * float64(time.Second))
	}
	ends := map[*hreq]time.Duration{}
	owner := map[*hreq]*simFlow{}
	granted := func(r *hreq, at time.Duration) {
		ends[r] = at + hold(r.f.Cost)
		if at >= warm {
			owner[r].admitted++
			owner[r].tokens += r.f.Cost
		}
	}
	for now := time.Duration(0); now < warm+measure; now += tick {
		h.step++
		h.clk.Advance(tick)
		for r, end := range ends {
			if end <= now {
				delete(ends, r)
				h.finish(r, 0)
			}
		}
		for i, fl := range flows {
			for next[i] <= now {
				next[i] += time.Duration(rng.ExpFloat64() / fl.rate * float64(time.Second))
				r := h.arrive(fl.f)
				owner[r] = fl
				if now >= warm {
					fl.offered++
				}
				if r.state == hHeld {
					granted(r, now)
				}
			}
		}
		for _, r := range h.poll() {
			if r.state == hHeld {
				granted(r, now)
			}
		}
		h.expire()
	}
	return h
}

// TestFairShareTenantsTenTimesAndOnce: two tenants in one class, one
// offering ten times its fair share, the other exactly its share. The
// small one gets its whole demand (within 10%), the large one the rest.
func TestFairShareTenantsTenTimesAndOnce(t *testing.T) {
	t.Parallel()
	// Limit 10, permits held 1 s: 10 requests/s, 5/s each when shared.
	big := &simFlow{f: Flow{Tenant: 1, Cost: 1000}, rate: 50}
	small := &simFlow{f: Flow{Tenant: 2, Cost: 1000}, rate: 5}
	runQueueSim(t, 10, queueSettings(200, 5*time.Second), []*simFlow{big, small},
		func(int) time.Duration { return time.Second }, 20*time.Second, 300*time.Second)
	got := float64(small.admitted) / float64(small.offered)
	t.Logf("small tenant: %d of %d admitted (%.1f%%); large tenant: %d of %d; %.2f/s in total",
		small.admitted, small.offered, 100*got, big.admitted, big.offered, float64(small.admitted+big.admitted)/300)
	if got < 0.9 {
		t.Fatalf("small tenant at its fair share got %.1f%% of its demand, want at least 90%%", 100*got)
	}
	if total := float64(small.admitted+big.admitted) / 300; total < 9.5 {
		t.Fatalf("throughput %.2f/s, want the limit's 10/s (the large tenant takes the rest)", total)
	}
}

// TestFairShareCountsTokens: two backlogged tenants, one sending 20k-token
// prompts, the other 1k. Shared by requests, the large prompts would get
// 95% of the tokens; shared by tokens, each gets half.
func TestFairShareCountsTokens(t *testing.T) {
	t.Parallel()
	large := &simFlow{f: Flow{Tenant: 1, Cost: 20000}, rate: 5}
	small := &simFlow{f: Flow{Tenant: 2, Cost: 1000}, rate: 50}
	runQueueSim(t, 10, queueSettings(500, 30*time.Second), []*simFlow{large, small},
		func(cost int) time.Duration { return 250*time.Millisecond + time.Duration(cost)*time.Second/8000 },
		20*time.Second, 300*time.Second)
	share := float64(large.tokens) / float64(large.tokens+small.tokens)
	t.Logf("tokens granted: 20k-prompt tenant %d (%d requests), 1k tenant %d (%d requests): %.1f%% to the large prompts",
		large.tokens, large.admitted, small.tokens, small.admitted, 100*share)
	if share > 0.55 || share < 0.45 {
		t.Fatalf("tenant with 20k-token prompts got %.1f%% of the tokens, want 50%% +- 5", 100*share)
	}
}

// TestBatchFloodKeepsInteractiveUnqueued: batch floods at five times the
// provider's capacity while interactive traffic uses a quarter of it.
// Batch is capped at half the limit, so interactive requests are never
// refused and (but for the rare Poisson burst above the other half) never
// wait, and batch still gets its half.
func TestBatchFloodKeepsInteractiveUnqueued(t *testing.T) {
	t.Parallel()
	// Limit 40, permits held 1 s: 40 requests/s.
	inter := &simFlow{f: Flow{Tenant: 1, Class: clsInteractive, Cost: 1000}, rate: 10}
	batch := &simFlow{f: Flow{Tenant: 2, Class: clsBatch, Cost: 1000}, rate: 200}
	h := runQueueSim(t, 40, queueSettings(200, 10*time.Second), []*simFlow{inter, batch},
		func(int) time.Duration { return time.Second }, 10*time.Second, 120*time.Second)
	var waits []time.Duration
	for _, r := range h.reqs {
		if r.f.Class != clsInteractive || r.state == hQueued {
			continue
		}
		if r.state == hRefused {
			t.Fatalf("interactive request %d refused: %v", r.id, r.err)
		}
		waits = append(waits, r.p.Waited())
	}
	slices.Sort(waits)
	p99 := waits[len(waits)*99/100]
	st := h.l.Stats()
	t.Logf("interactive: %d of %d admitted, wait p99 %v, max %v; batch: %d admitted (%.1f/s), %d refused",
		inter.admitted, inter.offered, p99, waits[len(waits)-1], batch.admitted, float64(batch.admitted)/120,
		st.RejectedDeadline+st.RejectedFull+st.RejectedTimeout)
	if p99 > 0 {
		t.Fatalf("interactive wait p99 %v, want 0 (no wait, as without the flood)", p99)
	}
	if perSec := float64(batch.admitted) / 120; perSec < 19 {
		t.Fatalf("batch got %.1f/s, want its share: half of 40 permits held 1 s = 20/s", perSec)
	}
}
