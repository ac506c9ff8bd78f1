package adaptive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"

	"github.com/sluicehq/sluice/adaptive/internal/bucket"
)

func providerSettings(algo string, ceiling int, ups ...string) ProviderSettings {
	s := DefaultProviderSettings(settingsFor(algo, ceiling))
	if len(ups) > 0 {
		s.Upstreams = nil
		for _, name := range ups {
			u := settings.DefaultUpstream()
			u.Name = name
			s.Upstreams = append(s.Upstreams, u)
		}
	}
	return s
}

// TestOneUpstreamSharesTheProviderController: with one upstream, the
// provider's limiter and the upstream share one controller, fed once per
// sample through the permit; a drop of a retried attempt reaches it once.
func TestOneUpstreamSharesTheProviderController(t *testing.T) {
	t.Parallel()
	clk := vtime.NewClock()
	r := NewRegistry(clk)
	provs, err := r.ReconcileProviders(map[string]ProviderSettings{"p": providerSettings(settings.AlgorithmAIMD, 50)})
	if err != nil {
		t.Fatal(err)
	}
	p := provs["p"]
	up := p.Upstreams.Upstreams()[0]
	if up.ctrl.Load().c != p.Limiter.ctrl.Load().c {
		t.Fatal("one upstream: its controller is not the provider limiter's")
	}
	before := p.Limiter.Stats().Limit
	clk.Advance(3 * time.Second)
	var permit Permit
	var a Attempt
	if !p.Limiter.TryAcquire(clk.Now(), Flow{}, &permit) {
		t.Fatal("refused")
	}
	if pr := p.Upstreams.Pick(clk.Now(), nil, &permit, nil, false, &a); !pr.OK {
		t.Fatal("no upstream")
	}
	drop := Outcome{Kind: OutcomeDrop, Drop: control.DropRateLimit}
	a.Finish(clk.Now(), AttemptResult{Status: 429, Outcome: drop, Usage: Usage{Sent: true}})
	permit.Finish(clk.Now(), drop) // the retry failed the same way
	st := p.Limiter.Stats()
	if st.Drops[control.DropRateLimit] != 1 {
		t.Errorf("drops counted %d, want 1 (one request, one congestion event)", st.Drops[control.DropRateLimit])
	}
	// One refusal at 1 in flight cuts the loss part to its min (control/loss.go:
	// a refusal at n in flight cuts to n-1); a second feed of the same
	// drop would be stale, so the limit alone cannot tell one feed from
	// two: the shared controller (checked above) and the single drop
	// counted are what say it was fed once.
	if want := settings.DefaultLimit().Complete(func(string) bool { return false }).Min; st.Limit != want || before <= want {
		t.Errorf("limit %d after one drop (from %d), want the min %d", st.Limit, before, want)
	}
	if n := up.inflight.Load(); n != 0 || st.Inflight != 0 {
		t.Errorf("in flight: upstream %d, provider %d, want 0", n, st.Inflight)
	}
}

// TestProviderUpstreamsAcrossReloads: going from one upstream to two and
// back keeps the upstream that stays, with its learned limit, and the
// provider's limit is the sum while there are two.
func TestProviderUpstreamsAcrossReloads(t *testing.T) {
	t.Parallel()
	clk := vtime.NewClock()
	r := NewRegistry(clk)
	one := providerSettings(settings.AlgorithmAIMD, 100, "a")
	provs, err := r.ReconcileProviders(map[string]ProviderSettings{"p": one})
	if err != nil {
		t.Fatal(err)
	}
	p := provs["p"]
	learned := learn(t, clk, p.Limiter, 3)
	a := p.Upstreams.Upstreams()[0]

	two := providerSettings(settings.AlgorithmAIMD, 100, "a", "b")
	if provs, err = r.ReconcileProviders(map[string]ProviderSettings{"p": two}); err != nil {
		t.Fatal(err)
	}
	if provs["p"] != p || p.Upstreams.Upstreams()[0] != a {
		t.Fatal("reload did not keep the provider and its upstream")
	}
	if _, isSet := p.Limiter.ctrl.Load().c.(*UpstreamSet); !isSet {
		t.Fatal("two upstreams: the limiter's controller is not the set")
	}
	if got, want := p.Limiter.Stats().Limit, learned+settings.DefaultLimit().Initial; got != want {
		t.Errorf("limit with two upstreams %d, want %d (a's learned %d + b's initial)", got, want, learned)
	}
	if provs, err = r.ReconcileProviders(map[string]ProviderSettings{"p": one}); err != nil || provs["p"] != p {
		t.Fatal("back to one upstream: the provider was not kept", err)
	}
	if got := p.Limiter.Stats().Limit; got != learned || p.Limiter.ctrl.Load().c != a.ctrl.Load().c {
		t.Errorf("back to one upstream: limit %d (want %d), controller shared %v", got, learned, p.Limiter.ctrl.Load().c == a.ctrl.Load().c)
	}
}

func TestReconcileProvidersListsAdmissionProblems(t *testing.T) {
	t.Parallel()
	r := NewRegistry(nil)
	bad := providerSettings(settings.AlgorithmFixed, 10, "a", "a")
	bad.Rate.PerClient.MaxKeys = 0
	bad.Retry.MaxAttempts = 0
	bad.Breaker.HalfOpenProbes = 0
	bad.Upstreams[1].Weight = 0
	_, err := r.ReconcileProviders(map[string]ProviderSettings{"p": bad})
	var se *SettingsError
	if !errors.As(err, &se) {
		t.Fatalf("error %v is not a *SettingsError", err)
	}
	for _, want := range []string{"rate.per_client.max_keys", "retries.max_attempts", "breaker.half_open_probes", "upstreams[1].weight", `upstreams[1].name: duplicate name "a"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if r.Provider("p") != nil {
		t.Error("an invalid provider was kept")
	}
}

// TestRatesNeeded: nothing configured and nothing learned, the rate layer
// is skipped; a configured limit, or the first response that reports the
// provider's quota, turns it on.
func TestRatesNeeded(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	r := NewRates(settings.DefaultRate(), clk)
	s := followSet(t, clk, settings.PerMinute{})
	if r.Needed(s) || r.Needed(nil) {
		t.Fatal("needed with nothing configured or learned")
	}
	// A request sent without a reservation takes no claim on the off
	// quota; its response's headers turn the quota on.
	var a Attempt
	now := clk.Now()
	if pr := s.Pick(now, nil, nil, nil, false, &a); !pr.OK {
		t.Fatal("no upstream")
	}
	if a.claim.state != claimNone {
		t.Fatal("an unreserved request claimed on an off quota")
	}
	if !a.Learn(now, 200, feedback.ErrNone, openAIHeaders(60, 59, 40000, 39000, time.Second), 0) {
		t.Fatal("first headers not applied")
	}
	if !r.Needed(s) {
		t.Fatal("not needed once the provider reported its quota")
	}
	if lv := quotaLevel(t, s.Upstreams()[0].Quota(), now, DimTokens); lv != 39000-2000 {
		t.Errorf("tokens level %d, want 39000 - 5%% margin", lv)
	}
	a.Finish(now, AttemptResult{Status: 200, Outcome: Outcome{Kind: OutcomeSuccess}, Usage: Usage{Sent: true}})

	own := settings.DefaultRate()
	own.RPM = 10
	if r2 := NewRates(own, clk); !r2.Needed(nil) {
		t.Error("not needed with rpm configured")
	}
	pc := settings.DefaultRate()
	pc.PerClient.TPM = 1000
	if r3 := NewRates(pc, clk); !r3.Needed(nil) {
		t.Error("not needed with per-client limits")
	}
}

// TestAcquireWithinBudget: the queue wait is bounded by what a rate wait
// left of max_wait.
func TestAcquireWithinBudget(t *testing.T) {
	t.Parallel()
	l := testLimiter(1, 10, time.Minute, nil)
	held := grant(t, l)
	var p Permit
	if err := l.AcquireWithin(time.Now(), Flow{}, nil, 0, &p); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("no budget left: %v, want ErrQueueTimeout", err)
	}
	start := time.Now()
	if err := l.AcquireWithin(start, Flow{}, nil, 20*time.Millisecond, &p); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("20ms budget: %v, want ErrQueueTimeout", err)
	}
	if l.Stats().RejectedTimeout != 2 {
		t.Errorf("timeouts counted %d, want 2", l.Stats().RejectedTimeout)
	}
	held.Finish(time.Now(), Outcome{})
	if err := l.AcquireWithin(time.Now(), Flow{}, nil, 0, &p); err != nil {
		t.Fatalf("a free permit with no budget left: %v", err)
	}
	p.Finish(time.Now(), Outcome{})
}

// TestQuotaState: a bucket's state (what a fleet would share) is its
// theoretical arrival time, readable without changing it.
func TestQuotaState(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	r := NewRates(settings.Rate{PerMinute: settings.PerMinute{RPM: 60}, DefaultMaxOutputTokens: 1, ProviderHeaders: settings.HeadersIgnore,
		PerClient: settings.PerClient{Key: settings.ClientKeyAPIKey, MaxKeys: 1}}, clk)
	var res Reservation
	r.Reserve(now, 0, Demand{}, nil, 0, &res)
	res.Settle(now, Usage{Sent: true})
	st, ok := r.Quota().State(DimRequests)
	if !ok || st.Capacity != 60 || st.Window != time.Minute || st.Interval != int64(time.Second)*bucket.TicksPerNs {
		t.Fatalf("state %+v", st)
	}
	// One request taken: the bucket is full again one interval from now.
	if want := r.Quota().clk.Ticks(now) + st.Interval; st.TAT != want {
		t.Errorf("TAT %d, want %d", st.TAT, want)
	}
	if _, ok := r.Quota().State(DimTokens); ok {
		t.Error("an unlimited dimension has a state")
	}
}

// TestRequestWindow: rpm counted over a shorter window holds that window's
// worth: rpm 180 over 1 s lets 3 through at once, then one every 333 ms.
func TestRequestWindow(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	s := settings.DefaultRate()
	s.RPM, s.RequestWindow = 180, time.Second
	if ps := s.Problems(); len(ps) != 0 {
		t.Fatal(ps)
	}
	r := NewRates(s, clk)
	now := clk.Now()
	var res [4]Reservation
	for i := 0; i < 3; i++ {
		if dec := r.Reserve(now, 0, Demand{}, nil, 0, &res[i]); dec.Limited {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	dec := r.Reserve(now, 0, Demand{}, nil, 0, &res[3])
	if !dec.Limited || dec.RetryAfter != time.Second/3+1 && dec.RetryAfter != time.Second/3 {
		t.Fatalf("fourth: %+v, want limited for a third of a second", dec)
	}
	if st := r.Stats(now).Provider[DimRequests]; st.Capacity != 3 || st.Window != time.Second {
		t.Errorf("bucket %+v, want 3 per second", st)
	}
	bad := settings.DefaultRate()
	bad.RequestWindow = 2 * time.Minute
	if ps := bad.Problems(); len(ps) != 1 || ps[0].Key != "request_window" {
		t.Errorf("a 2m window: %v", ps)
	}
}
