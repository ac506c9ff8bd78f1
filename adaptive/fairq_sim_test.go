package adaptive

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
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
func runQueueSim(t *testing.T, limit int, q settings.Queue, flows []*simFlow, hold func(cost int) time.Duration, warm, measure time.Duration) *harness {
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
		ends[r] = at + hold(r.f.MaxOutput)
		if at >= warm {
			owner[r].admitted++
			owner[r].tokens += r.f.MaxOutput
		}
	}
	for now := time.Duration(0); now < warm+measure; now += tick {
		released := h.stepSim(now, tick, ends)
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
		// Only a release hands permits to waiters (one thread, virtual
		// time); deadlines are checked every 50 ms.
		if released {
			h.grantWaiting(now, granted)
		}
		if now%(50*time.Millisecond) == 0 {
			h.expire()
		}
	}
	return h
}

// TestFairShareTenantsTenTimesAndOnce: two tenants in one class, one
// offering ten times its fair share, the other exactly its share. The
// small one gets its whole demand (within 10%), the large one the rest.
func TestFairShareTenantsTenTimesAndOnce(t *testing.T) {
	testutil.Simulation(t)
	t.Parallel()
	// Limit 10, permits held 1 s: 10 requests/s, 5/s each when shared.
	big := &simFlow{f: Flow{Tenant: 1, MaxOutput: 1000}, rate: 50}
	small := &simFlow{f: Flow{Tenant: 2, MaxOutput: 1000}, rate: 5}
	runQueueSim(t, 10, queueSettings(200, 10*time.Second), []*simFlow{big, small},
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
	testutil.Simulation(t)
	t.Parallel()
	large := &simFlow{f: Flow{Tenant: 1, MaxOutput: 20000}, rate: 5}
	small := &simFlow{f: Flow{Tenant: 2, MaxOutput: 1000}, rate: 50}
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
	testutil.Simulation(t)
	t.Parallel()
	// Limit 40, permits held 1 s: 40 requests/s.
	inter := &simFlow{f: Flow{Tenant: 1, Class: clsInteractive, MaxOutput: 1000}, rate: 10}
	batch := &simFlow{f: Flow{Tenant: 2, Class: clsBatch, MaxOutput: 1000}, rate: 200}
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

// TestWaitEstimateMatchesWait: under steady overloads, the wait the
// queue estimates for a request when it arrives (what a refused request is
// told in Retry-After) is within a factor of two of the wait it then has,
// for nine requests in ten of those estimated to wait a second or more.
// Overloads: a tenant at twice the capacity beside one at half its share;
// and a batch class over its share while standard traffic takes varying
// permits. Permits are held 0.5 to 1.5 s.
func TestWaitEstimateMatchesWait(t *testing.T) {
	testutil.Simulation(t)
	t.Parallel()
	for _, tc := range []struct {
		name  string
		flows []*simFlow
	}{
		{"tenant flood", []*simFlow{
			{f: Flow{Tenant: 1, Class: clsStandard, MaxOutput: 1000}, rate: 36},
			{f: Flow{Tenant: 2, Class: clsStandard, MaxOutput: 1000}, rate: 4},
		}},
		{"batch over its share", []*simFlow{
			{f: Flow{Tenant: 1, Class: clsStandard, MaxOutput: 1000}, rate: 8},
			{f: Flow{Tenant: 2, Class: clsInteractive, MaxOutput: 1000}, rate: 2},
			{f: Flow{Tenant: 3, Class: clsBatch, MaxOutput: 1000}, rate: 20},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ratios := waitEstimateRatios(t, tc.flows)
			slices.Sort(ratios)
			p5, p50, p95 := ratios[len(ratios)*5/100], ratios[len(ratios)/2], ratios[len(ratios)*95/100]
			t.Logf("actual / estimated wait over %d requests estimated at 1 s or more: p5 %.2f, p50 %.2f, p95 %.2f", len(ratios), p5, p50, p95)
			if len(ratios) < 100 || p5 < 0.5 || p95 > 2 {
				t.Fatalf("actual / estimated wait p5 %.2f, p95 %.2f over %d: want within a factor of 2 (0.5 .. 2)", p5, p95, len(ratios))
			}
		})
	}
}

// waitEstimateRatios runs flows against a limit of 20 with a one-minute
// max_wait and returns, for the requests that queued with an estimate of a
// second or more, their actual wait over that estimate.
func waitEstimateRatios(t *testing.T, flows []*simFlow) []float64 {
	h := newHarness(t, 20, queueSettings(1000, time.Minute))
	rng := rand.New(rand.NewPCG(5, 5))
	const tick = 5 * time.Millisecond
	next := make([]time.Duration, len(flows))
	ends := map[*hreq]time.Duration{}
	est := map[*hreq]time.Duration{}
	var ratios []float64
	granted := func(r *hreq, now time.Duration) {
		ends[r] = now + time.Duration((0.5+rng.Float64())*float64(time.Second))
		if e := est[r]; now > 30*time.Second && e >= time.Second {
			ratios = append(ratios, float64(r.p.Waited())/float64(e))
		}
	}
	for now := time.Duration(0); now < 150*time.Second; now += tick {
		released := h.stepSim(now, tick, ends)
		for i, fl := range flows {
			for next[i] <= now {
				next[i] += time.Duration(rng.ExpFloat64() / fl.rate * float64(time.Second))
				r := h.arrive(fl.f)
				if r.state == hQueued {
					est[r] = r.w.told // what its refusal would have said
				}
				if r.state == hHeld {
					granted(r, now)
				}
			}
		}
		if released {
			h.grantWaiting(now, granted)
		}
	}
	return ratios
}

// TestRetryAfterMatchesRetryWait: a tenant floods at three times the
// capacity with a 2 s deadline per request; those that will not fit are
// refused at once with Retry-After. A retry sent at the time a refusal
// said (sampled twice a second, allowed 10 s) waits at most twice that
// and at least 0.4 of it: p5 and p95 of wait / Retry-After in 0.4 .. 2. A
// request is refused only when even its shortest plausible wait exceeds
// its deadline by the estimate's recent margin of error, so the refused
// are told more than the deadline, while the queue their retry joins is
// held near the deadline by those refusals: a retry waits a little over
// half of what it was told. Permits are held 0.3 s + a lognormal second.
func TestRetryAfterMatchesRetryWait(t *testing.T) {
	testutil.Simulation(t)
	t.Parallel()
	h := newHarness(t, 20, queueSettings(1000, 10*time.Second))
	rng := rand.New(rand.NewPCG(9, 9))
	const tick = 5 * time.Millisecond
	const warmup = 20 * time.Second
	warm := Flow{Tenant: 1, MaxOutput: 450, MaxWait: 10 * time.Second}
	flood := Flow{Tenant: 1, MaxOutput: 450, MaxWait: 2 * time.Second}
	retry := Flow{Tenant: 1, MaxOutput: 450}
	ends := map[*hreq]time.Duration{}
	pending := map[time.Duration]time.Duration{} // retries to send: when -> what the refusal said
	told := map[*hreq]time.Duration{}            // retries sent: what their refusal said
	var ratios []float64
	nextArrival, nextSample := time.Duration(0), warmup+5*time.Second
	refusedAt := 0
	granted := func(r *hreq, now time.Duration) {
		ends[r] = now + time.Duration(0.3e9+1e9*math.Exp(0.5*rng.NormFloat64()-0.125))
		if ra, ok := told[r]; ok {
			ratios = append(ratios, float64(r.p.Waited())/float64(ra))
		}
	}
	for now := time.Duration(0); now < 140*time.Second; now += tick {
		released := h.stepSim(now, tick, ends)
		for nextArrival <= now {
			// The queue first proves its estimate on a backlog served
			// within its deadlines (a little over the capacity, 10 s
			// deadlines); from cold, a flood whose requests time out
			// before they are served would never prove it, and its
			// requests would wait and time out instead.
			rate, f := 46.0, flood
			if now < warmup {
				rate, f = 16, warm
			}
			nextArrival += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
			r := h.arrive(f)
			switch {
			case r.state == hHeld:
				granted(r, now)
			case errors.Is(r.err, ErrDeadline) && now >= nextSample && now < 120*time.Second:
				refusedAt++
				nextSample = now + 500*time.Millisecond
				ra := r.p.Refusal().RetryAfter
				pending[now+ra] = ra
			}
		}
		for at, ra := range pending {
			if at <= now {
				delete(pending, at)
				r := h.arrive(retry)
				told[r] = ra
				if r.state == hHeld {
					granted(r, now)
				}
			}
		}
		if released {
			h.grantWaiting(now, granted)
		}
		if now%(50*time.Millisecond) == 0 {
			h.expire()
		}
	}
	slices.Sort(ratios)
	p5, p50, p95 := ratios[len(ratios)*5/100], ratios[len(ratios)/2], ratios[len(ratios)*95/100]
	t.Logf("%d retries at Retry-After (of %d sampled refusals): wait / Retry-After p5 %.2f, p50 %.2f, p95 %.2f", len(ratios), refusedAt, p5, p50, p95)
	if len(ratios) < 150 || p5 < 0.4 || p95 > 2 {
		t.Fatalf("wait / Retry-After p5 %.2f, p95 %.2f over %d retries: want within [0.4, 2]", p5, p95, len(ratios))
	}
}
