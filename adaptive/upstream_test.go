package adaptive

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/settings"
)

// fixedUpstreams builds a set of upstreams with a fixed limit each.
func fixedUpstreams(t testing.TB, clk control.Clock, ceiling int, ups ...settings.Upstream) *UpstreamSet {
	t.Helper()
	l := settings.DefaultLimit()
	l.Algorithm, l.Ceiling, l.Min, l.Initial = settings.AlgorithmFixed, ceiling, 1, 1
	s, err := NewUpstreamSet(clk, l, settings.DefaultBreaker(), ups, true)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustPick(t testing.TB, s *UpstreamSet, now time.Time, res *Reservation, avoid *Upstream, strict bool) *Attempt {
	t.Helper()
	a := new(Attempt)
	if r := s.Pick(now, res, nil, avoid, strict, a); !r.OK {
		t.Fatalf("pick failed: %+v", r)
	}
	return a
}

var okResult = AttemptResult{Status: 200, Outcome: Outcome{Kind: OutcomeSuccess}, Usage: Usage{Sent: true}}

// TestPickMostHeadroom: requests go to the upstream with the most
// headroom relative to its limit; an upstream's own ceiling is a hard
// cap.
func TestPickMostHeadroom(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	s := fixedUpstreams(t, clk, 10,
		settings.Upstream{Name: "big", Weight: 1},
		settings.Upstream{Name: "small", Weight: 1, Ceiling: 2})
	big, small := s.Upstreams()[0], s.Upstreams()[1]
	// Limits 10 and 2: the loads stay balanced, so 12 requests split 10:2.
	counts := map[*Upstream]int{}
	var held []*Attempt
	for range 12 {
		a := mustPick(t, s, now, nil, nil, false)
		counts[a.Upstream()]++
		held = append(held, a)
	}
	if counts[big] != 10 || counts[small] != 2 {
		t.Fatalf("split big %d small %d, want 10 and 2", counts[big], counts[small])
	}
	// Everyone is at its limit: the 13th goes over a soft limit (big),
	// never over a hard ceiling (small).
	if a := mustPick(t, s, now, nil, nil, false); a.Upstream() != big {
		t.Fatalf("13th went to %s, want big (small's ceiling is 2)", a.Upstream().Name())
	}
	for _, a := range held {
		a.Finish(now, okResult)
	}
	if s.Limit() != 12 {
		t.Fatalf("provider limit %d, want 10 + 2", s.Limit())
	}
}

// TestPickWeights: with equal limits, weights set the split.
func TestPickWeights(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	s := fixedUpstreams(t, clk, 30, settings.Upstream{Name: "a", Weight: 3}, settings.Upstream{Name: "b", Weight: 1})
	a, b := s.Upstreams()[0], s.Upstreams()[1]
	var held []*Attempt
	for range 20 {
		held = append(held, mustPick(t, s, now, nil, nil, false))
	}
	if na, nb := a.inflight.Load(), b.inflight.Load(); na != 15 || nb != 5 {
		t.Fatalf("a %d b %d, want 15 and 5", na, nb)
	}
	for _, x := range held {
		x.Finish(now, okResult)
	}
}

// TestPickSkipsOpenBreakers: traffic avoids an upstream whose breaker is
// open; with none usable, Pick says when the first lets probes through;
// then one probe at a time goes through.
func TestPickSkipsOpenBreakers(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	s := fixedUpstreams(t, clk, 10, settings.Upstream{Name: "a", Weight: 5}, settings.Upstream{Name: "b", Weight: 1})
	a, b := s.Upstreams()[0], s.Upstreams()[1]
	brk := settings.DefaultBreaker()
	for range brk.ConsecutiveFailures {
		mustPick(t, s, clk.Now(), nil, b, true).Finish(clk.Now(), AttemptResult{Status: 500, Class: feedback.ErrServer, Usage: Usage{Sent: true}})
	}
	if a.brk.State(clk.Now()) != BreakerOpen {
		t.Fatal("a not open")
	}
	if s.Limit() != 10 {
		t.Fatalf("provider limit %d with a open, want b's 10", s.Limit())
	}
	for range 5 {
		x := mustPick(t, s, clk.Now(), nil, nil, false)
		if x.Upstream() != b {
			t.Fatal("attempt sent to the open upstream")
		}
		x.Finish(clk.Now(), okResult)
	}
	clk.Advance(5 * time.Second)
	for range brk.ConsecutiveFailures {
		mustPick(t, s, clk.Now(), nil, nil, false).Finish(clk.Now(), AttemptResult{Failure: AttemptConnect})
	}
	r := s.Pick(clk.Now(), nil, nil, nil, false, new(Attempt))
	if r.OK || r.RetryAfter != 10*time.Second {
		t.Fatalf("none usable: %+v, want refused until a half-opens in 10s", r)
	}
	if s.Limit() != 0 {
		t.Fatalf("provider limit %d with every breaker open, want 0", s.Limit())
	}
	clk.Advance(10 * time.Second)
	probe := mustPick(t, s, clk.Now(), nil, nil, false)
	if probe.Upstream() != a || !probe.Probe() {
		t.Fatalf("got %s (probe %v), want a probe to a", probe.Upstream().Name(), probe.Probe())
	}
	probe.Finish(clk.Now(), okResult)
}

// TestPickAvoidsFailedUpstream: a retry goes to another upstream when one
// is usable (strict or not), back to the same one only when it is the
// only one and the retry may.
func TestPickAvoidsFailedUpstream(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	s := fixedUpstreams(t, clk, 10, settings.Upstream{Name: "a", Weight: 10}, settings.Upstream{Name: "b", Weight: 1})
	a, b := s.Upstreams()[0], s.Upstreams()[1]
	first := mustPick(t, s, now, nil, nil, false)
	if first.Upstream() != a {
		t.Fatal("first attempt not on a")
	}
	first.Finish(now, AttemptResult{Status: 503, Usage: Usage{Sent: true}})
	retry := mustPick(t, s, now, nil, a, false)
	if retry.Upstream() != b || !retry.Failover() {
		t.Fatalf("retry on %s failover %v, want b, a failover", retry.Upstream().Name(), retry.Failover())
	}
	retry.Finish(now, okResult)
	one := fixedUpstreams(t, clk, 10, settings.Upstream{Name: "only", Weight: 1})
	only := one.Upstreams()[0]
	if again := mustPick(t, one, now, nil, only, false); again.Upstream() != only || again.Failover() {
		t.Fatal("non-strict retry with one upstream did not go back to it")
	} else {
		again.Finish(now, okResult)
	}
	if r := one.Pick(now, nil, nil, only, true, new(Attempt)); r.OK {
		t.Fatal("strict retry went back to the failed upstream")
	}
	if b.Stats(now).Failovers != 1 {
		t.Fatalf("failovers %d, want 1", b.Stats(now).Failovers)
	}
}

// TestPickFollowsReservation: the first attempt goes where the rate
// reservation is bound, taking its claim; when that upstream is full, the
// claim moves to another one that has room; when none has, the bound one
// takes it over its (soft) limit.
func TestPickFollowsReservation(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	rates := NewRates(settings.DefaultRate(), clk)
	s := fixedUpstreams(t, clk, 1,
		settings.Upstream{Name: "a", Weight: 1, Rate: settings.PerMinute{RPM: 10}},
		settings.Upstream{Name: "b", Weight: 1, Rate: settings.PerMinute{RPM: 100}})
	a, b := s.Upstreams()[0], s.Upstreams()[1]
	var r1, r2 Reservation
	rates.Reserve(now, 0, Demand{}, s, 0, &r1)
	rates.Reserve(now, 0, Demand{}, s, 0, &r2)
	if r1.Bound() != a || r2.Bound() != b { // a first; then b, the less spent
		t.Fatalf("bound to %s and %s, want a and b", r1.Bound().Name(), r2.Bound().Name())
	}
	x0 := mustPick(t, s, now, nil, nil, false) // an unbound attempt fills b (limit 1)
	if x0.Upstream() != b {
		t.Fatalf("x0 on %s, want b", x0.Upstream().Name())
	}
	x2 := mustPick(t, s, now, &r2, nil, false)
	if x2.Upstream() != a || x2.Failover() {
		t.Fatalf("r2's attempt on %s (failover %v), want a: b is full", x2.Upstream().Name(), x2.Failover())
	}
	x1 := mustPick(t, s, now, &r1, nil, false) // a and b full: a, over its limit
	if x1.Upstream() != a {
		t.Fatalf("r1's attempt on %s, want its bound a", x1.Upstream().Name())
	}
	if lv := quotaLevel(t, b.Quota(), now, DimRequests); lv != 99 {
		t.Fatalf("b's quota %d, want 99 (x0 only): r2's claim moved to a", lv)
	}
	if lv := quotaLevel(t, a.Quota(), now, DimRequests); lv != 8 {
		t.Fatalf("a's quota %d, want 8 (r1 and r2)", lv)
	}
	for _, x := range []*Attempt{x0, x1, x2} {
		x.Finish(now, okResult)
	}
	r1.Settle(now, Usage{Sent: true})
	r2.Settle(now, Usage{Sent: true})
}

// TestUpstreamSetIsTheProviderController: the provider's limiter admits
// up to the sum of its upstreams' limits; an upstream's drop cuts its own
// limit and, at once, the provider's.
func TestUpstreamSetIsTheProviderController(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	l := settings.DefaultLimit()
	l.Algorithm, l.Ceiling, l.Min, l.Initial, l.Cooldown = settings.AlgorithmAIMD, 100, 1, 10, 0
	s, err := NewUpstreamSet(clk, l, settings.DefaultBreaker(), []settings.Upstream{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}, true)
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(LimiterSettings{Limit: l, Queue: settings.DefaultQueue()}, s, clk)
	if st := lim.Stats(); st.Limit != 20 || st.Binding != BindingUpstreams {
		t.Fatalf("provider limit %d binding %q, want 20 (10 + 10) by upstreams", st.Limit, st.Binding)
	}
	var p Permit
	if !lim.TryAcquire(clk.Now(), Flow{}, &p) {
		t.Fatal("no permit")
	}
	var a Attempt
	if r := s.Pick(clk.Now(), nil, &p, nil, false, &a); !r.OK {
		t.Fatal(r)
	}
	a.Finish(clk.Now(), AttemptResult{Status: 429, Class: feedback.ErrRateLimit, Outcome: Outcome{Kind: OutcomeDrop, Drop: control.DropRateLimit}, Usage: Usage{Sent: true}})
	// A refusal at n in flight cuts the loss part to n-1 (control/loss.go): here
	// the upstream had 1 in flight, so its limit falls to its min, 1.
	if got := a.Upstream().Stats(clk.Now()).Limit; got != 1 {
		t.Fatalf("dropped upstream's limit %d, want 1", got)
	}
	if st := lim.Stats(); st.Limit != 11 {
		t.Fatalf("provider limit %d after the drop, want 11 (1 + 10)", st.Limit)
	}
	p.Finish(clk.Now(), Outcome{Kind: OutcomeDrop, Drop: control.DropRateLimit})
}

// TestOneOfTwoUpstreamsFailing: one of two upstreams answers 500 to
// everything. With retries and breakers, clients see under 1% errors,
// and while its breaker is open the failing upstream gets only probes.
func TestOneOfTwoUpstreamsFailing(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	rng := rand.New(rand.NewPCG(3, 4))
	s := fixedUpstreams(t, clk, 50, settings.Upstream{Name: "bad", Weight: 1}, settings.Upstream{Name: "good", Weight: 1})
	bad := s.Upstreams()[0]
	pol := NewRetryPolicy(settings.DefaultRetries(), rng.Float64)
	clientErrors, requests, sentWhileOpen, probesWhileOpen := 0, 0, 0, 0
	for i := range 20000 {
		clk.Advance(10 * time.Millisecond) // 100 requests per second, 200 s
		now := clk.Now()
		requests++
		pol.Request(now)
		var att Attempt
		var avoid *Upstream
		strict := false
		for n := 1; ; n++ {
			open := bad.brk.State(now) != BreakerClosed
			if r := s.Pick(now, nil, nil, avoid, strict, &att); !r.OK {
				t.Fatalf("request %d: no upstream: %+v", i, r)
			}
			res := okResult
			if att.Upstream() == bad {
				res = AttemptResult{Status: 500, Class: feedback.ErrServer, Usage: Usage{Sent: true}}
				if open {
					sentWhileOpen++
					if att.Probe() {
						probesWhileOpen++
					}
				}
			}
			att.Finish(now, res)
			if res.Status == 200 {
				break
			}
			d := pol.Decide(now, res, RetryContext{Attempts: n, Deadline: now.Add(time.Minute), Alternatives: s.HasAlternative(now, att.Upstream())})
			if !d.Retry {
				clientErrors++
				break
			}
			avoid, strict = att.Upstream(), d.Elsewhere
		}
	}
	if rate := float64(clientErrors) / float64(requests); rate >= 0.01 {
		t.Errorf("clients saw %.2f%% errors, want under 1%%", 100*rate)
	}
	if sentWhileOpen != probesWhileOpen {
		t.Errorf("%d attempts reached the failing upstream while its breaker was not closed, only %d of them probes", sentWhileOpen, probesWhileOpen)
	}
	st := bad.Stats(clk.Now())
	t.Logf("%d requests, %d client errors; failing upstream: %d attempts, breaker opened %d times, %d probes", requests, clientErrors, st.Attempts, st.Breaker.Opened, probesWhileOpen)
	if st.Attempts > 200 {
		t.Errorf("failing upstream got %d attempts in 200 s, want few (probes every 15 s)", st.Attempts)
	}
}

// TestAdmissionUnderReconfiguration: requests run through rates, upstream
// choice, learning and settlement while the rate limits, the upstream
// list and the breaker settings change under them and their state is
// read. Run with -race. Afterwards nothing is left in flight, and every
// quota refills to full.
func TestAdmissionUnderReconfiguration(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	rs := settings.DefaultRate()
	rs.PerMinute = settings.PerMinute{RPM: 1e6, TPM: 1e9}
	rs.PerClient.PerMinute, rs.PerClient.MaxKeys = settings.PerMinute{RPM: 1e5}, 4
	rates := NewRates(rs, clk)
	lim := settings.DefaultLimit()
	ups, err := NewUpstreamSet(clk, lim, settings.DefaultBreaker(), []settings.Upstream{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}, true)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg, rc sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var res Reservation
			var a Attempt
			for i := 0; i < 2000; i++ {
				now := clk.Now()
				d := Demand{InputTokens: rng.IntN(1000), OutputTokens: rng.IntN(500)}
				if dec := rates.Reserve(now, uint64(rng.IntN(10)), d, ups, time.Second, &res); dec.Limited || dec.TooLarge {
					continue
				}
				if ups.Pick(now, &res, nil, nil, false, &a).OK {
					a.Learn(now, 200, feedback.ErrNone, openAIHeaders(1000, int64(rng.IntN(1000)), 1e6, int64(rng.IntN(1e6)), time.Second), 0)
					a.Finish(now, AttemptResult{Status: []int{200, 500, 429}[rng.IntN(3)], Usage: Usage{Sent: true, InputTokens: d.InputTokens}})
				}
				res.Settle(now, Usage{Sent: true, InputTokens: d.InputTokens})
			}
		})
	}
	rc.Go(func() {
		names := [][]settings.Upstream{{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}}, {{Name: "b", Weight: 1, Ceiling: 3}}, {{Name: "c", Weight: 1}, {Name: "a", Weight: 1}}}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			clk.Advance(10 * time.Millisecond)
			brk := settings.DefaultBreaker()
			brk.Window = time.Duration(1+i%3) * time.Second
			lim.Initial = 10 + i%5
			if err := ups.Reconfigure(lim, brk, names[i%3], i%2 == 0); err != nil {
				t.Error(err)
				return
			}
			rs.TPM = int(1e9 + i)
			rs.PerClient.MaxKeys = 4 + i%2
			rates.Reconfigure(rs)
			_ = ups.Stats(clk.Now())
			_ = rates.Stats(clk.Now())
			_ = ups.State()
		}
	})
	for _, u := range ups.Upstreams() {
		_ = u.Stats(clk.Now())
	}
	wg.Wait()
	close(stop)
	rc.Wait()
	clk.Advance(time.Hour)
	for _, u := range ups.Upstreams() {
		if n := u.inflight.Load(); n != 0 {
			t.Errorf("upstream %s: %d in flight after every request ended", u.Name(), n)
		}
	}
	for d := range NumDims {
		if lv, c, ok := rates.Quota().Level(clk.Now(), d); ok && lv != c {
			t.Errorf("provider %s: level %d of %d an hour later", d, lv, c)
		}
	}
}

// TestBusyOpensNoBreakerOnTheLastUpstream: 503 and 529 answers (busy, not
// broken) open an upstream's breaker only while another upstream can take
// its traffic; on the last upstream standing they are left to the limit's
// loss signal, and the provider keeps serving. Broken answers (500s,
// resets) open it either way.
func TestBusyOpensNoBreakerOnTheLastUpstream(t *testing.T) {
	t.Parallel()
	overloaded := AttemptResult{Status: 529, Class: feedback.ErrOverloaded, Usage: Usage{Sent: true}}
	unavailable := AttemptResult{Status: 503, Class: feedback.ErrUnavailable, Usage: Usage{Sent: true}}
	broken := AttemptResult{Status: 500, Class: feedback.ErrServer, Usage: Usage{Sent: true}}
	n := 3 * settings.DefaultBreaker().MinRequests
	for _, tc := range []struct {
		name     string
		ups      []settings.Upstream
		r        AttemptResult
		wantOpen bool
	}{
		{"529 on the only upstream", []settings.Upstream{{Name: "a", Weight: 1}}, overloaded, false},
		{"503 on the only upstream", []settings.Upstream{{Name: "a", Weight: 1}}, unavailable, false},
		{"500 on the only upstream", []settings.Upstream{{Name: "a", Weight: 1}}, broken, true},
		{"529 with another upstream", []settings.Upstream{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}, overloaded, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newVClock()
			s := fixedUpstreams(t, clk, 10, tc.ups...)
			ups := s.Upstreams()
			a, other := ups[0], ups[len(ups)-1]
			if other == a {
				other = nil
			}
			for i := 0; i < n && a.brk.State(clk.Now()) == BreakerClosed; i++ {
				x := mustPick(t, s, clk.Now(), nil, other, other != nil) // always a
				if x.Upstream() != a {
					t.Fatalf("attempt went to %s", x.Upstream().Name())
				}
				x.Finish(clk.Now(), tc.r)
				clk.Advance(10 * time.Millisecond)
			}
			if open := a.brk.State(clk.Now()) == BreakerOpen; open != tc.wantOpen {
				t.Fatalf("after up to %d answers %d: breaker open %v, want %v", n, tc.r.Status, open, tc.wantOpen)
			}
			if !tc.wantOpen && s.Limit() == 0 {
				t.Fatal("provider limit 0 with the breaker closed")
			}
		})
	}
}

// TestUpstreamSetRejectsBadSettings: NewUpstreamSet checks everything and
// builds nothing on error; Reconfigure keeps an upstream's state by name.
func TestUpstreamSetSettings(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	good := []settings.Upstream{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}
	for name, ups := range map[string][]settings.Upstream{
		"none":      nil,
		"duplicate": {{Name: "a", Weight: 1}, {Name: "a", Weight: 1}},
		"weight":    {{Name: "a", Weight: 0}},
	} {
		if _, err := NewUpstreamSet(clk, settings.DefaultLimit(), settings.DefaultBreaker(), ups, true); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s, err := NewUpstreamSet(clk, settings.DefaultLimit(), settings.DefaultBreaker(), good, true)
	if err != nil {
		t.Fatal(err)
	}
	b := s.Upstreams()[1]
	var a Attempt
	s.Pick(clk.Now(), nil, nil, s.Upstreams()[0], true, &a) // to b
	bad := settings.DefaultBreaker()
	bad.HalfOpenProbes = 0
	if err := s.Reconfigure(settings.DefaultLimit(), bad, good, true); err == nil {
		t.Fatal("bad breaker settings accepted")
	}
	lim := settings.DefaultLimit()
	lim.Initial = 5
	if err := s.Reconfigure(lim, settings.DefaultBreaker(), []settings.Upstream{{Name: "b", Weight: 2}, {Name: "c", Weight: 1}}, false); err != nil {
		t.Fatal(err)
	}
	ups := s.Upstreams()
	if len(ups) != 2 || ups[0] != b || ups[0].Index() != 0 || ups[0].inflight.Load() != 1 {
		t.Fatalf("b not kept with its attempt in flight: %v", ups)
	}
	if got := ups[0].Stats(clk.Now()).Limit; got != 20 {
		t.Errorf("kept upstream's limit %d, want 20 carried over (not the new initial 5)", got)
	}
	if got := ups[1].Stats(clk.Now()).Limit; got != 5 {
		t.Errorf("new upstream's limit %d, want the initial 5", got)
	}
	if s.Follow() {
		t.Error("provider headers still followed")
	}
	a.Finish(clk.Now(), okResult)
}
