package control

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

func newCtrlForTest(t testing.TB, s settings.Limit, clk Clock) *adaptiveController {
	t.Helper()
	c, err := New(s, clk)
	if err != nil {
		t.Fatal(err)
	}
	ac, ok := c.(*adaptiveController)
	if !ok {
		t.Fatalf("New(%q) returned %T", s.Algorithm, c)
	}
	return ac
}

func ctrlAIMDSettings() settings.Limit {
	s := settings.DefaultLimit()
	s.Algorithm = settings.AlgorithmAIMD
	return s
}

// ctrlSuccess is a FirstToken sample dispatched now with inflight permits in use.
func ctrlSuccess(clk *vtime.Clock, inflight int, ttft time.Duration) Sample {
	now := clk.At(clk.Elapsed())
	return Sample{Kind: FirstToken, Dispatched: now.Add(-ttft), InflightAtDispatch: inflight, TTFT: ttft, Now: now}
}

func ctrlDrop(dispatched time.Time, inflight int, retryAfter time.Duration) Sample {
	return Sample{Kind: Dropped, Dispatched: dispatched, InflightAtDispatch: inflight, Drop: DropRateLimit, RetryAfter: retryAfter}
}

func ctrlAssertInRange(t *testing.T, c Controller, s settings.Limit) {
	t.Helper()
	if l := c.Limit(); l < s.Min || l > s.Ceiling {
		t.Fatalf("limit %d outside [%d, %d]; state %+v", l, s.Min, s.Ceiling, c.State())
	}
}

func TestDefaultSettingsValid(t *testing.T) {
	for _, algo := range []string{settings.AlgorithmGradient2, settings.AlgorithmAIMD, settings.AlgorithmFixed} {
		s := settings.DefaultLimit()
		s.Algorithm = algo
		c, err := New(s, vtime.NewClock())
		if err != nil {
			t.Fatalf("%s: %v", algo, err)
		}
		if got := c.Limit(); algo != settings.AlgorithmFixed && got != s.Initial {
			t.Errorf("%s: initial limit %d, want %d", algo, got, s.Initial)
		}
		if st := c.State(); st.Algorithm != algo {
			t.Errorf("%s: State().Algorithm = %q", algo, st.Algorithm)
		}
	}
}

func TestNewControllerListsEveryError(t *testing.T) {
	bad := settings.Limit{
		Algorithm:     "vegas",
		Ceiling:       5,
		Min:           10,
		Initial:       0,
		TTFTTarget:    -time.Second,
		MinTokenRate:  math.NaN(),
		Window:        0,
		WindowSamples: 0,
		Smoothing:     0,
		LongWindow:    0,
		Backoff:       1,
		Cooldown:      -1,
		PrefillRate:   math.Inf(1),
	}
	c, err := New(bad, nil)
	if err == nil || c != nil {
		t.Fatalf("NewController accepted %+v", bad)
	}
	for _, want := range []string{
		`algorithm: must be "gradient2", "aimd" or "fixed", got "vegas"`,
		"min: must be between 1 and ceiling (5), got 10",
		"ttft_target: must be 0",
		"min_token_rate: must be between 0 and 100000, got NaN",
		"window: must be between 100ms and 1m, got 0s",
		"window_samples: must be between 1 and 10000, got 0",
		"smoothing: must be greater than 0 and at most 1, got 0",
		"long_window: must be between 10 and 100000, got 0",
		"backoff: must be at least 0.5 and less than 1, got 1",
		"cooldown: must be between 0s and 10m, got -1ns",
		"prefill_tokens_per_second: must be 0 (no normalisation) or between 1 and 10000000, got +Inf",
		"nil clock",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}

	// Each problem alone is rejected too, and never repaired.
	cases := map[string]func(*settings.Limit){
		"smoothing > 1":   func(s *settings.Limit) { s.Smoothing = 1.5 },
		"smoothing < 0":   func(s *settings.Limit) { s.Smoothing = -0.1 },
		"backoff 0":       func(s *settings.Limit) { s.Backoff = 0 },
		"backoff > 1":     func(s *settings.Limit) { s.Backoff = 1.1 },
		"ceiling 0":       func(s *settings.Limit) { s.Ceiling = 0 },
		"min 0":           func(s *settings.Limit) { s.Min = 0 },
		"initial > ceil":  func(s *settings.Limit) { s.Initial = s.Ceiling + 1 },
		"initial < min":   func(s *settings.Limit) { s.Min, s.Initial = 5, 4 },
		"long window -1":  func(s *settings.Limit) { s.LongWindow = -1 },
		"negative rate":   func(s *settings.Limit) { s.MinTokenRate = -1 },
		"empty algorithm": func(s *settings.Limit) { s.Algorithm = "" },
	}
	for name, mutate := range cases {
		for _, algo := range []string{settings.AlgorithmGradient2, settings.AlgorithmAIMD, settings.AlgorithmFixed} {
			s := settings.DefaultLimit()
			s.Algorithm = algo
			mutate(&s)
			if _, err := New(s, vtime.NewClock()); err == nil {
				t.Errorf("%s/%s: accepted", name, algo)
			}
		}
	}
}

func TestFixedController(t *testing.T) {
	s := settings.DefaultLimit()
	s.Algorithm, s.Ceiling = settings.AlgorithmFixed, 37
	c, err := New(s, vtime.NewClock())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, smp := range []Sample{
		{Kind: FirstToken, TTFT: time.Hour, InflightAtDispatch: 37},
		{Kind: Dropped, RetryAfter: time.Minute, Dispatched: now},
		{Kind: TokenRate, Rate: 0.001},
		{Kind: FirstToken, TTFT: -1},
	} {
		if got := c.Observe(smp); got != 37 {
			t.Errorf("Observe(%+v) = %d, want 37", smp, got)
		}
	}
	if got := c.Limit(); got != 37 {
		t.Errorf("Limit() = %d", got)
	}
	if st := c.State(); st.Binding != "fixed" || st.Limit != 37 {
		t.Errorf("State() = %+v", st)
	}
}

func TestAIMDBurstIsOneCut(t *testing.T) {
	clk := vtime.NewClock()
	s := ctrlAIMDSettings() // initial 20, backoff 0.9, cooldown 2s
	c := newCtrlForTest(t, s, clk)
	clk.Advance(10 * time.Second)
	sent := clk.At(9 * time.Second) // all dispatched before the burst
	for i := 0; i < 50; i++ {
		c.Observe(ctrlDrop(sent, 20-i%20, 0))
		clk.Advance(20 * time.Millisecond) // 50 x 20ms = 1s, inside the cool-down
	}
	// The first refusal came at 20 in flight: the provider accepts at most
	// 19. The rest of the burst was dispatched before that cut: stale.
	if got := c.Limit(); got != 19 {
		t.Fatalf("after a burst of 50 429s: limit %d, want one cut to 19 (the in-flight count of the first, minus one)", got)
	}
	// Fresh drops inside the cool-down, drawn at 20 in flight (above the
	// limit, admitted while the cut was applied): no change.
	for i := 0; i < 10; i++ {
		c.Observe(ctrlDrop(clk.Now(), 20, 0))
		clk.Advance(10 * time.Millisecond)
	}
	if got := c.Limit(); got != 19 {
		t.Fatalf("fresh drops inside the cool-down at 20 in flight: limit %d, want 19", got)
	}
	// After the cool-down, a drop of a request sent before the cut is stale.
	clk.Advance(2 * time.Second)
	c.Observe(ctrlDrop(sent, 20, 0))
	if got := c.Limit(); got != 19 {
		t.Fatalf("stale drop after cool-down: limit %d, want 19", got)
	}
	// A fresh one at 15 in flight cuts to 14.
	c.Observe(ctrlDrop(clk.Now().Add(-time.Millisecond), 15, 0))
	if got := c.Limit(); got != 14 {
		t.Fatalf("fresh drop at 15 in flight after cool-down: limit %d, want 14", got)
	}
	// A refusal whose in-flight count is unknown cuts by Backoff: 14*0.9.
	clk.Advance(3 * time.Second)
	c.Observe(ctrlDrop(clk.Now(), 0, 0))
	if got := c.Limit(); got != 12 {
		t.Fatalf("fresh drop with unknown in-flight: limit %d, want 12 (14 x 0.9)", got)
	}
}

func TestAIMDHoldInsideCooldown(t *testing.T) {
	clk := vtime.NewClock()
	c := newCtrlForTest(t, ctrlAIMDSettings(), clk)
	clk.Advance(time.Second)
	c.Observe(ctrlDrop(clk.Now(), 20, 0)) // cut to 19
	clk.Advance(100 * time.Millisecond)
	// Fresh drop in the cool-down, drawn at 20 in flight (> limit): nothing.
	c.Observe(ctrlDrop(clk.Now(), 20, 0))
	if got := c.Limit(); got != 19 {
		t.Fatalf("limit %d, want 19", got)
	}
	// Fresh drop drawn at 17 in flight: hold below it, at 16. No cut, so
	// the cool-down is unchanged.
	c.Observe(ctrlDrop(clk.Now(), 17, 0))
	if got := c.Limit(); got != 16 {
		t.Fatalf("limit %d, want a hold at 16", got)
	}
	clk.Advance(2 * time.Second)
	c.Observe(ctrlDrop(clk.Now(), 16, 0)) // cool-down over: cut to 15
	if got := c.Limit(); got != 15 {
		t.Fatalf("limit %d, want 15", got)
	}
}

// After a refusal at n in flight the loss part grows above n-1 by one per
// cool-down, not one per success: a provider with a hard concurrency cap
// (here 19) sees at most one probing request per cool-down.
func TestLossProbesSlowlyAboveRefusal(t *testing.T) {
	clk := vtime.NewClock()
	c := newCtrlForTest(t, ctrlAIMDSettings(), clk)
	clk.Advance(time.Second)
	c.Observe(ctrlDrop(clk.Now(), 20, 0)) // bound 19
	refusals := 0
	for i := 0; i < 250; i++ { // 250 requests at full use in 10 s
		clk.Advance(40 * time.Millisecond)
		if n := c.Limit(); n > 19 {
			refusals++
			c.Observe(ctrlDrop(clk.Now(), n, 0))
			continue
		}
		c.Observe(ctrlSuccess(clk, c.Limit(), 300*time.Millisecond))
	}
	if got := c.Limit(); got < 19 || got > 20 {
		t.Fatalf("limit %d against a cap of 19, want 19 or 20", got)
	}
	if refusals > 5 {
		t.Fatalf("%d probing refusals in 10 s, want at most one per 2 s cool-down", refusals)
	}
}

// A provider that refuses at concurrencies it also accepts (a request-rate
// limit) is not cut: once a request dispatched above a refusal's bound is
// served, each refusal holds its own permit back until its Retry-After has
// passed and then gives it back, spread over a Retry-After.
func TestLossRefusalsNotAboutConcurrencyHold(t *testing.T) {
	clk := vtime.NewClock()
	c := newCtrlForTest(t, ctrlAIMDSettings(), clk)
	clk.Advance(time.Second)
	c.Observe(ctrlDrop(clk.Now(), 5, 0)) // bound 4, limit 4
	if got := c.Limit(); got != 4 {
		t.Fatalf("limit %d, want 4", got)
	}
	// Probing: a request dispatched at 5 in flight is served.
	clk.Advance(2 * time.Second)
	c.Observe(ctrlSuccess(clk, 4, 300*time.Millisecond)) // probe step to 5
	clk.Advance(100 * time.Millisecond)
	c.Observe(ctrlSuccess(clk, 5, 300*time.Millisecond)) // accepted above the bound
	for c.Limit() < 12 {                                 // grows +1 per success again
		clk.Advance(50 * time.Millisecond)
		c.Observe(ctrlSuccess(clk, c.Limit(), 300*time.Millisecond))
	}
	clk.Advance(3 * time.Second)
	// Two refusals with Retry-After 1 s, at 12 and 11 in flight: held, not cut.
	c.Observe(ctrlDrop(clk.Now(), 12, time.Second))
	clk.Advance(200 * time.Millisecond)
	c.Observe(ctrlDrop(clk.Now(), 11, time.Second))
	if got := c.Limit(); got != 10 {
		t.Fatalf("after two refusals at 12 and 11 in flight: limit %d, want 10 (two permits held)", got)
	}
	// The permits come back spread over a Retry-After, not as a burst
	// of dispatches that the request-rate limit would refuse again: the
	// first when both Retry-Afters have passed, the second half a
	// Retry-After later (two held).
	rate := func() { c.Observe(Sample{Kind: TokenRate, Rate: 30, Dispatched: clk.Now(), InflightAtDispatch: 1}) }
	clk.Advance(1100 * time.Millisecond)
	rate()
	if got := c.Limit(); got != 11 {
		t.Fatalf("after the Retry-After: limit %d, want one held permit back (11)", got)
	}
	clk.Advance(400 * time.Millisecond)
	rate()
	if got := c.Limit(); got != 11 {
		t.Fatalf("0.4 s later: limit %d, want the second permit still held (11)", got)
	}
	clk.Advance(200 * time.Millisecond)
	rate()
	if got := c.Limit(); got != 12 {
		t.Fatalf("after half a Retry-After: limit %d, want both held permits back (12)", got)
	}
}

func TestRetryAfterFreezesGrowth(t *testing.T) {
	for _, algo := range []string{settings.AlgorithmAIMD, settings.AlgorithmGradient2} {
		t.Run(algo, func(t *testing.T) {
			clk := vtime.NewClock()
			s := settings.DefaultLimit()
			s.Algorithm = algo
			s.WindowSamples = 1
			c := newCtrlForTest(t, s, clk)
			clk.Advance(time.Second)
			c.Observe(ctrlDrop(clk.Now(), 20, 5*time.Second))
			frozen := c.Limit()
			if frozen != 19 {
				t.Fatalf("limit after a refusal at 20 in flight = %d, want 19", frozen)
			}
			if st := c.State(); !st.FrozenUntil.Equal(clk.At(6 * time.Second)) {
				t.Fatalf("FrozenUntil = %v, want drop time + 5s", st.FrozenUntil)
			}
			// 5 s of fast successes at full use: no growth at all.
			for clk.Elapsed() < 6*time.Second-50*time.Millisecond {
				clk.Advance(50 * time.Millisecond)
				if got := c.Observe(ctrlSuccess(clk, c.Limit(), 300*time.Millisecond)); got > frozen {
					t.Fatalf("limit grew to %d at %v, inside Retry-After", got, clk.Elapsed())
				}
			}
			// After the freeze: growth resumes.
			for i := 0; i < 200; i++ {
				clk.Advance(50 * time.Millisecond)
				c.Observe(ctrlSuccess(clk, c.Limit(), 300*time.Millisecond))
			}
			if got := c.Limit(); got <= frozen {
				t.Fatalf("limit %d after the freeze, want growth above %d", got, frozen)
			}
			if st := c.State(); !st.FrozenUntil.IsZero() {
				t.Errorf("FrozenUntil still reported after the freeze: %v", st.FrozenUntil)
			}
		})
	}
}

// A storm of successes (what a misclassified insufficient_quota would never
// produce, since the proxy does not report it) must not collapse the limit:
// only drops, slow TTFT or slow streams may lower it.
func TestSuccessStormDoesNotCollapse(t *testing.T) {
	for _, algo := range []string{settings.AlgorithmAIMD, settings.AlgorithmGradient2} {
		t.Run(algo, func(t *testing.T) {
			clk := vtime.NewClock()
			s := settings.DefaultLimit()
			s.Algorithm = algo
			c := newCtrlForTest(t, s, clk)
			low := c.Limit()
			for i := 0; i < 20000; i++ {
				clk.Advance(5 * time.Millisecond)
				c.Observe(ctrlSuccess(clk, c.Limit(), 400*time.Millisecond))
				if l := c.Limit(); l < low {
					t.Fatalf("limit fell from %d to %d on successes only", low, l)
				} else {
					low = l
				}
			}
			if got := c.Limit(); got != s.Ceiling {
				t.Errorf("after 20000 successes at full use: limit %d, want the ceiling %d", got, s.Ceiling)
			}
		})
	}
}

func TestLimitsStayClamped(t *testing.T) {
	for _, algo := range []string{settings.AlgorithmAIMD, settings.AlgorithmGradient2} {
		t.Run(algo, func(t *testing.T) {
			clk := vtime.NewClock()
			s := settings.DefaultLimit()
			s.Algorithm, s.Min, s.Initial, s.Ceiling = algo, 5, 6, 12
			s.MinTokenRate, s.WindowSamples = 20, 1
			c := newCtrlForTest(t, s, clk)
			// Down: drops, slow streams and huge TTFTs across many cool-downs.
			for i := 0; i < 100; i++ {
				clk.Advance(3 * time.Second)
				c.Observe(ctrlDrop(clk.Now(), c.Limit(), 0))
				ctrlAssertInRange(t, c, s)
				c.Observe(Sample{Kind: TokenRate, Rate: 1, Dispatched: clk.Now()})
				ctrlAssertInRange(t, c, s)
				c.Observe(ctrlSuccess(clk, c.Limit(), 30*time.Second))
				ctrlAssertInRange(t, c, s)
			}
			if got := c.Limit(); got != s.Min {
				t.Errorf("limit %d after sustained congestion, want Min %d", got, s.Min)
			}
			if st := c.State(); st.Loss < float64(s.Min) || (algo == settings.AlgorithmGradient2 && st.Delay < float64(s.Min)) {
				t.Errorf("a part left [Min, Ceiling]: %+v", st)
			}
			// Up: fast successes and fast streams.
			for i := 0; i < 5000; i++ {
				clk.Advance(100 * time.Millisecond)
				c.Observe(ctrlSuccess(clk, c.Limit(), 100*time.Millisecond))
				c.Observe(Sample{Kind: TokenRate, Rate: 100, Dispatched: clk.Now()})
				ctrlAssertInRange(t, c, s)
			}
			if got := c.Limit(); got != s.Ceiling {
				t.Errorf("limit %d after sustained success, want Ceiling %d; state %+v", got, s.Ceiling, c.State())
			}
			if st := c.State(); st.Loss > float64(s.Ceiling) || st.Delay > float64(s.Ceiling) {
				t.Errorf("a part left [Min, Ceiling]: %+v", st)
			}
		})
	}
}

func TestBadSamplesNeverPoison(t *testing.T) {
	clk := vtime.NewClock()
	s := settings.DefaultLimit()
	s.WindowSamples = 3
	s.MinTokenRate = 5
	c := newCtrlForTest(t, s, clk)
	bad := []Sample{
		{Kind: FirstToken, TTFT: 0},
		{Kind: FirstToken, TTFT: -time.Second},
		{Kind: FirstToken, TTFT: time.Duration(math.MaxInt64)},
		{Kind: FirstToken, TTFT: 2 * time.Hour},
		{Kind: TokenRate, Rate: math.NaN()},
		{Kind: TokenRate, Rate: math.Inf(1)},
		{Kind: TokenRate, Rate: math.Inf(-1)},
		{Kind: TokenRate, Rate: -3},
	}
	// Valid but extreme: a prompt estimate far above the real prompt (the
	// normalised TTFT would be negative) and a negative estimate.
	odd := []Sample{
		{Kind: FirstToken, TTFT: 200 * time.Millisecond, PromptTokens: 10_000_000},
		{Kind: FirstToken, TTFT: 200 * time.Millisecond, PromptTokens: -5},
		{Kind: FirstToken, TTFT: time.Nanosecond},
		{Kind: FirstToken, TTFT: 300 * time.Millisecond, InflightAtDispatch: -4},
		{Kind: Dropped, InflightAtDispatch: -1},
		{Kind: SampleKind(99)},
	}
	for round := 0; round < 200; round++ {
		for _, smp := range append(bad, odd...) {
			clk.Advance(100 * time.Millisecond)
			smp.Dispatched = clk.Now()
			c.Observe(smp)
			ctrlAssertInRange(t, c, s)
			clk.Advance(100 * time.Millisecond)
			c.Observe(ctrlSuccess(clk, c.Limit(), 300*time.Millisecond))
			ctrlAssertInRange(t, c, s)
		}
	}
	st := c.State()
	if want := uint64(200 * len(bad)); st.BadSamples != want {
		t.Errorf("BadSamples = %d, want %d", st.BadSamples, want)
	}
	if st.WindowsApplied == 0 {
		t.Errorf("no window was applied; the delay part stopped working")
	}
	if st.DelayResets != 0 {
		t.Errorf("DelayResets = %d: a guarded sample reached the library as poison", st.DelayResets)
	}
	for _, v := range []float64{st.Delay, st.Loss, st.Rate, float64(st.TTFTBaseline), float64(st.TTFTMedian)} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Errorf("non-finite value in state %+v", st)
		}
	}
	if st.TTFTMedian <= 0 || st.TTFTBaseline <= 0 {
		t.Errorf("TTFT median %v / baseline %v must be > 0", st.TTFTMedian, st.TTFTBaseline)
	}
}

func TestStaleTTFTSamplesSkipped(t *testing.T) {
	clk := vtime.NewClock()
	s := settings.DefaultLimit()
	s.WindowSamples = 5
	c := newCtrlForTest(t, s, clk)
	// Ten windows at 300 ms teach the baseline and grow the limit.
	for w := 0; w < 10; w++ {
		for i := 0; i < 5; i++ {
			clk.Advance(500 * time.Millisecond)
			c.Observe(ctrlSuccess(clk, c.Limit(), 300*time.Millisecond))
		}
	}
	before := c.State()
	// A window of 3 s TTFTs: the delay part cuts.
	for i := 0; i < 5; i++ {
		clk.Advance(500 * time.Millisecond)
		c.Observe(ctrlSuccess(clk, c.Limit(), 3*time.Second))
	}
	cut := c.State()
	if cut.Delay >= before.Delay || cut.WindowsApplied != before.WindowsApplied+1 {
		t.Fatalf("no delay cut: before %+v after %+v", before, cut)
	}
	// Slow samples of requests dispatched before the cut: skipped, no window.
	sent := clk.Now().Add(-time.Second)
	for i := 0; i < 20; i++ {
		clk.Advance(500 * time.Millisecond)
		now := clk.Now()
		c.Observe(Sample{Kind: FirstToken, Dispatched: sent, InflightAtDispatch: c.Limit(), TTFT: now.Sub(sent), Now: now})
	}
	st := c.State()
	if st.StaleSamples != 20 || st.WindowsApplied != cut.WindowsApplied || st.Delay != cut.Delay {
		t.Fatalf("stale samples were used: %+v", st)
	}
	// Samples dispatched after the cut count again.
	for i := 0; i < 5; i++ {
		clk.Advance(500 * time.Millisecond)
		c.Observe(ctrlSuccess(clk, c.Limit(), 300*time.Millisecond))
	}
	if st := c.State(); st.WindowsApplied != cut.WindowsApplied+1 {
		t.Fatalf("fresh samples did not close a window: %+v", st)
	}
}

func TestDelayWindow(t *testing.T) {
	t0 := time.Unix(0, 0)
	w := newDelayWindow(2*time.Second, 3, t0)
	w.add(5*time.Millisecond, 4, 0)
	w.add(1*time.Millisecond, 9, 0)
	w.add(3*time.Millisecond, 2, 0)
	if w.ready(t0.Add(time.Second)) {
		t.Fatal("ready before the window length passed")
	}
	if !w.ready(t0.Add(2 * time.Second)) {
		t.Fatal("not ready with 3 samples after 2 s")
	}
	st := w.close(t0.Add(2 * time.Second))
	if st.median != 3*time.Millisecond || st.maxInflight != 9 || st.meanInflight != 5 || st.n != 3 {
		t.Fatalf("close = %+v; want median 3ms, max in flight 9, mean 5, n 3", st)
	}
	if st.absDev != 0.004 { // |5-3| + |1-3| + |3-3| ms
		t.Fatalf("absDev = %v, want 0.004", st.absDev)
	}
	w.add(2*time.Millisecond, 1, 0)
	w.add(8*time.Millisecond, 1, 0)
	w.addRate(30)
	w.addRate(10)
	w.addRate(20)
	if w.ready(t0.Add(10 * time.Second)) {
		t.Fatal("ready with 2 of 3 samples")
	}
	w.add(4*time.Millisecond, 1, 0)
	w.add(6*time.Millisecond, 1, 0)
	if st := w.close(t0.Add(10 * time.Second)); st.median != 5*time.Millisecond || st.rate != 20 {
		t.Fatalf("even median = %v, rate %v; want 5ms and 20", st.median, st.rate)
	}
	// Early close: with early set, enough samples close it before length.
	w.early = 5
	for i := 0; i < 5; i++ {
		w.add(time.Millisecond, 1, 0)
	}
	if !w.ready(t0.Add(10*time.Second + time.Millisecond)) {
		t.Fatal("window with early=5 and 5 samples not ready before its length")
	}
}

func TestNormaliseTTFT(t *testing.T) {
	for _, c := range []struct {
		ttft   time.Duration
		prompt int
		rate   float64
		want   time.Duration
	}{
		{time.Second, 4000, 8000, 500 * time.Millisecond},
		{time.Second, 0, 8000, time.Second},
		{time.Second, 4000, 0, time.Second},
		{time.Second, 80000, 8000, time.Millisecond}, // prefill estimate > TTFT: floor
		{time.Microsecond, 0, 0, time.Millisecond},
		{time.Second, -100, 8000, time.Second},
	} {
		if got := normaliseTTFT(c.ttft, c.prompt, c.rate); got != c.want {
			t.Errorf("normaliseTTFT(%v, %d, %v) = %v, want %v", c.ttft, c.prompt, c.rate, got, c.want)
		}
	}
}

// A provider that slows a little every window: a learned baseline follows
// the drift and keeps the limit up; a configured target holds and cuts.
func TestSetpointHoldsWhenProviderSlowsGradually(t *testing.T) {
	run := func(target time.Duration) State {
		clk := vtime.NewClock()
		s := settings.DefaultLimit()
		s.WindowSamples, s.TTFTTarget, s.PrefillRate = 1, target, 0
		c := newCtrlForTest(t, s, clk)
		ttft := 300 * time.Millisecond
		for w := 0; w < 1000; w++ {
			clk.Advance(2 * time.Second)
			if w > 50 {
				ttft = ttft * 1002 / 1000 // +0.2% per window: 300 ms -> ~2 s in 32 min
			}
			c.Observe(ctrlSuccess(clk, c.Limit(), ttft))
		}
		return c.State()
	}
	learned, target := run(0), run(500*time.Millisecond)
	t.Logf("learned: limit %d, baseline %v; target 500ms: limit %d", learned.Limit, learned.TTFTBaseline, target.Limit)
	if target.TTFTBaseline != 500*time.Millisecond {
		t.Errorf("set-point baseline = %v, want the target", target.TTFTBaseline)
	}
	if target.Limit != 2 {
		t.Errorf("set-point limit %d, want Min (TTFT is 5x the target)", target.Limit)
	}
	if learned.Limit < 25 {
		t.Errorf("learned-baseline limit %d: the drift test no longer shows the drift (baseline %v)", learned.Limit, learned.TTFTBaseline)
	}
}

func TestSetpointGrowsBelowAndShrinksAboveTarget(t *testing.T) {
	clk := vtime.NewClock()
	s := settings.DefaultLimit()
	s.WindowSamples, s.TTFTTarget, s.PrefillRate = 1, time.Second, 0
	c := newCtrlForTest(t, s, clk)
	for i := 0; i < 5; i++ {
		clk.Advance(2 * time.Second)
		c.Observe(ctrlSuccess(clk, c.Limit(), 900*time.Millisecond))
	}
	delay := func() float64 { return c.State().Delay }
	grown := delay()
	if grown <= 20 {
		t.Fatalf("delay part %v: did not grow with TTFT below target", grown)
	}
	clk.Advance(2 * time.Second)
	c.Observe(ctrlSuccess(clk, c.Limit(), 1500*time.Millisecond))
	// 1.5 s against 1 s: gradient 2/3, smoothed: x (1 - 0.5/3).
	if got, want := delay(), math.Floor(grown*5/6+0.5); math.Abs(got-want) > 1 {
		t.Fatalf("delay part %v after a window at 1.5x target, want about %v", got, want)
	}
	// App-limited window (max in flight < limit/2): no change.
	before := delay()
	clk.Advance(2 * time.Second)
	c.Observe(ctrlSuccess(clk, 1, 5*time.Second))
	if got := delay(); got != before {
		t.Fatalf("app-limited window changed the delay part %v -> %v", before, got)
	}
}

func TestRatePart(t *testing.T) {
	clk := vtime.NewClock()
	s := ctrlAIMDSettings()
	s.MinTokenRate = 20
	c := newCtrlForTest(t, s, clk)
	rate := func(r float64) { c.Observe(Sample{Kind: TokenRate, Rate: r, Dispatched: clk.Now()}) }
	rate(50)
	if st := c.State(); st.Rate != 0 || st.Binding != "loss" || st.TokenRate != 50 {
		t.Fatalf("fast streams engaged the rate part: %+v", st)
	}
	clk.Advance(time.Second)
	for i := 0; i < 10; i++ { // slow burst: one cut per cool-down
		rate(10)
		clk.Advance(100 * time.Millisecond)
	}
	if st := c.State(); st.Limit != 18 || st.Binding != "rate" || st.Rate != 18 {
		t.Fatalf("after slow streams: %+v, want rate part 18 binding", st)
	}
	clk.Advance(2 * time.Second)
	rate(10) // 18*0.9 = 16.2
	if got := c.Limit(); got != 16 {
		t.Fatalf("second cut: limit %d, want 16", got)
	}
	// Additive growth: +1/part per fast sample, capped at the loss part.
	for i := 0; i < 16; i++ {
		rate(30)
	}
	if got := c.Limit(); got != 17 {
		t.Fatalf("after 16 fast samples: limit %d, want 17", got)
	}
	for i := 0; i < 200; i++ {
		rate(30)
	}
	if st := c.State(); st.Limit != 20 || st.Rate != 0 || st.Binding != "loss" {
		t.Fatalf("rate part did not go inactive at the loss part: %+v", st)
	}
	// Never above the others: a drop lowers the loss part below it.
	clk.Advance(3 * time.Second)
	c.Observe(ctrlDrop(clk.Now(), 20, 0))
	if st := c.State(); st.Limit != 19 || st.Binding != "loss" {
		t.Fatalf("after a drop at 20 in flight: %+v, want loss 19 binding", st)
	}
}

// Observe from many goroutines with State and Limit readers. No part
// registers a library listener, so there is nothing to deadlock on; the
// watchdog fails the test instead of hanging if that ever changes.
func TestControllerConcurrent(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, algo := range []string{settings.AlgorithmGradient2, settings.AlgorithmAIMD} {
		s := settings.DefaultLimit()
		s.Algorithm, s.MinTokenRate, s.Window, s.Cooldown = algo, 10, 100*time.Millisecond, time.Millisecond
		clk := vtime.NewClock()
		clk.Tick = 500 * time.Microsecond
		c, err := New(s, clk)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		var bad atomic.Int64
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 3000; i++ {
					now := clk.Now()
					var smp Sample
					switch (g + i) % 7 {
					case 0:
						smp = ctrlDrop(now, c.Limit(), time.Duration(i%3)*time.Millisecond)
					case 1:
						smp = Sample{Kind: TokenRate, Rate: float64(i % 40), Dispatched: now}
					default:
						smp = Sample{Kind: FirstToken, TTFT: time.Duration(1+i%900) * time.Millisecond, Dispatched: now, InflightAtDispatch: c.Limit()}
					}
					if l := c.Observe(smp); l < s.Min || l > s.Ceiling {
						bad.Add(1)
					}
				}
			}(g)
		}
		var readers sync.WaitGroup
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if st := c.State(); st.Limit < s.Min || st.Limit > s.Ceiling {
					bad.Add(1)
				}
				_ = c.Limit()
			}
		}()
		done := make(chan struct{})
		go func() { wg.Wait(); close(stop); readers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: concurrent Observe/State did not finish: deadlock?", algo)
		}
		if n := bad.Load(); n != 0 {
			t.Errorf("%s: %d limits outside [Min, Ceiling]", algo, n)
		}
	}
}

// A non-streaming answer is a success for the loss part and never a delay
// sample: it must not count as a bad TTFT nor feed the delay window.
func TestAnsweredIsSuccessWithoutDelaySample(t *testing.T) {
	clk := vtime.NewClock()
	s := settings.DefaultLimit()
	s.Algorithm = settings.AlgorithmAIMD
	s.Initial = 10
	c, err := New(s, clk)
	if err != nil {
		t.Fatal(err)
	}
	before := c.Limit()
	for i := 0; i < 5; i++ {
		c.Observe(Sample{Kind: Answered, InflightAtDispatch: before})
	}
	if c.Limit() <= before {
		t.Fatalf("limit %d after 5 answered successes at full use, want growth above %d", c.Limit(), before)
	}
	g, _ := New(settings.DefaultLimit(), clk)
	g.Observe(Sample{Kind: Answered, InflightAtDispatch: 1})
	if st := g.State(); st.BadSamples != 0 || st.WindowsApplied != 0 {
		t.Fatalf("answered counted as a delay sample: %+v", st)
	}
}

// answeredAtFullUse feeds n non-streaming answers, one every step, each
// dispatched with the whole limit in use (inflight, when > 0, instead).
func answeredAtFullUse(c Controller, clk *vtime.Clock, n int, step time.Duration, inflight int) {
	for i := 0; i < n; i++ {
		clk.Advance(step)
		in := inflight
		if in == 0 {
			in = c.Limit()
		}
		c.Observe(Sample{Kind: Answered, Dispatched: clk.Now(), InflightAtDispatch: in})
	}
}

// A provider served only non-streaming requests gives the delay part no
// sample. The limit must not stay at Initial while the load uses all of
// it: gradient2 then doubles per window, up to the ceiling, and refusals
// cut it as they cut aimd. On the wire, before: 60 non-streaming clients,
// a provider with room for 40, ceiling 50, the limit stayed at 20.
func TestNonStreamingTrafficIsNotHeldAtInitial(t *testing.T) {
	s := settings.DefaultLimit() // gradient2, ceiling 50, initial 20, 2 s / 5 sample windows
	clk := vtime.NewClock()
	c := newCtrlForTest(t, s, clk)
	seen := []int{c.Limit()}
	for i := 0; i < 200 && c.Limit() < s.Ceiling; i++ {
		answeredAtFullUse(c, clk, 1, 50*time.Millisecond, 0)
		if l := c.Limit(); l != seen[len(seen)-1] {
			seen = append(seen, l)
		}
	}
	if want := []int{20, 40, 50}; !slices.Equal(seen, want) {
		t.Fatalf("limits %v under non-streaming load at full use, want %v (doubling per window, up to the ceiling)", seen, want)
	}
	if got := clk.Elapsed(); got > 3*s.Window {
		t.Errorf("ceiling reached after %v, want within %v", got, 3*s.Window)
	}

	// A refusal cuts the limit (the loss part), and answers at full use
	// do not push it back past the loss part.
	clk.Advance(time.Second)
	c.Observe(Sample{Kind: Dropped, Drop: DropOverloaded, Dispatched: clk.Now(), InflightAtDispatch: 50})
	cut := c.Limit()
	if cut >= s.Ceiling {
		t.Fatalf("limit %d after a refusal, want a cut below %d", cut, s.Ceiling)
	}
	if st := c.State(); st.Binding != "loss" {
		t.Errorf("binding %q after the refusal, want loss: %+v", st.Binding, st)
	}
}

// A cold start dispatches the whole limit at once, so the first answers
// were sent with 1, 2, ... 20 in flight, in whatever order they come back.
// The limit was in use (the last of the burst filled it), so ten of them
// over a window double it: judged one by one, the early ones of the burst
// would read as a load below the limit, and the limit would wait at
// Initial for the answers to requests sent later.
func TestNonStreamingColdStartBurstCounts(t *testing.T) {
	s := settings.DefaultLimit() // initial 20, 2 s / 5 sample windows
	clk := vtime.NewClock()
	c := newCtrlForTest(t, s, clk)
	start := clk.Now()
	order := rand.New(rand.NewPCG(1, 2)).Perm(s.Initial)
	step := s.Window/time.Duration(2*s.WindowSamples-1) + time.Millisecond // ten answers over a window
	for i, k := range order[:2*s.WindowSamples] {
		clk.Advance(step)
		c.Observe(Sample{Kind: Answered, Dispatched: start, InflightAtDispatch: k + 1})
		if i < 2*s.WindowSamples-1 && c.Limit() != s.Initial {
			t.Fatalf("limit %d after %d answers, want %d until a window of them", c.Limit(), i+1, s.Initial)
		}
	}
	if got := c.Limit(); got != 2*s.Initial {
		t.Fatalf("limit %d after ten answers of a cold start's burst (in flight at dispatch %v), want %d", got, order[:2*s.WindowSamples], 2*s.Initial)
	}
}

// An idle provider's limit must not inflate: answers dispatched well below
// the limit grow nothing.
func TestNonStreamingBelowTheLimitGrowsNothing(t *testing.T) {
	clk := vtime.NewClock()
	c := newCtrlForTest(t, settings.DefaultLimit(), clk)
	answeredAtFullUse(c, clk, 400, 50*time.Millisecond, 5)
	if got := c.Limit(); got != 20 {
		t.Fatalf("limit %d after 400 answers at 5 in flight, want 20 (Initial)", got)
	}
}

// During a Retry-After freeze, non-streaming answers raise nothing.
func TestNonStreamingGrowthFrozenByRetryAfter(t *testing.T) {
	clk := vtime.NewClock()
	c := newCtrlForTest(t, settings.DefaultLimit(), clk)
	c.Observe(Sample{Kind: Dropped, Drop: DropRateLimit, RetryAfter: time.Minute, Dispatched: clk.Now(), InflightAtDispatch: 20})
	before := c.Limit()
	answeredAtFullUse(c, clk, 400, 50*time.Millisecond, 0) // 20 s, inside the freeze
	if got := c.Limit(); got > before {
		t.Fatalf("limit %d -> %d inside a Retry-After freeze", before, got)
	}
}

// When streams feed the delay window, their TTFT decides: non-streaming
// answers beside them change nothing.
func TestNonStreamingAnswersBesideStreamsChangeNothing(t *testing.T) {
	run := func(withAnswers bool) []int {
		clk := vtime.NewClock()
		c := newCtrlForTest(t, settings.DefaultLimit(), clk)
		var limits []int
		for i := 0; i < 600; i++ {
			clk.Advance(50 * time.Millisecond)
			ttft := 200 * time.Millisecond
			if c.Limit() > 30 {
				ttft = 3 * time.Second // a provider with room for 30
			}
			c.Observe(Sample{Kind: FirstToken, TTFT: ttft, Dispatched: clk.Now().Add(-ttft), InflightAtDispatch: c.Limit()})
			if withAnswers {
				answeredAtFullUse(c, clk, 2, 0, 0)
			}
			limits = append(limits, c.Limit())
		}
		return limits
	}
	streams, mixed := run(false), run(true)
	if !slices.Equal(streams, mixed) {
		t.Fatalf("limits with non-streaming answers beside the streams differ:\nstreams only %v\nmixed        %v", streams[len(streams)-20:], mixed[len(mixed)-20:])
	}
}

// Rare streams among non-streaming traffic still decide: the answers do
// not raise the limit past what the streams' windows say. Raised blindly,
// the limit was at the ceiling before the streams' first window, which
// then learned the congested TTFT as its baseline (a stream every 6 s,
// ten answers a second: the limit stayed at the ceiling whatever the TTFT
// said); resetting the window at each blind step kept it from ever
// closing.
func TestRareStreamsAmongNonStreamingStillCut(t *testing.T) {
	clk := vtime.NewClock()
	c := newCtrlForTest(t, settings.DefaultLimit(), clk)
	for i := 0; i < 3000; i++ { // 300 s
		clk.Advance(100 * time.Millisecond)
		c.Observe(Sample{Kind: Answered, Dispatched: clk.Now(), InflightAtDispatch: c.Limit()})
		if i%60 == 0 {
			ttft := 200 * time.Millisecond
			if c.Limit() > 30 {
				ttft = 3 * time.Second // a provider with room for 30
			}
			c.Observe(Sample{Kind: FirstToken, TTFT: ttft, Dispatched: clk.Now().Add(-ttft), InflightAtDispatch: c.Limit()})
		}
	}
	st := c.State()
	if st.WindowsApplied == 0 || st.Limit > 35 {
		t.Fatalf("after 5 minutes: %d delay windows, limit %d; want windows closed and the limit cut near 30: %+v", st.WindowsApplied, st.Limit, st)
	}
}

// When streams stop and only non-streaming answers come, the delay part
// steps aside again, blindQuiet windows after the last first token.
func TestNonStreamingAfterStreamsStop(t *testing.T) {
	s := settings.DefaultLimit()
	clk := vtime.NewClock()
	c := newCtrlForTest(t, s, clk)
	for i := 0; i < 1200; i++ { // 60 s of streams, a provider with room for 30
		clk.Advance(50 * time.Millisecond)
		ttft := 200 * time.Millisecond
		if c.Limit() > 30 {
			ttft = 3 * time.Second
		}
		c.Observe(Sample{Kind: FirstToken, TTFT: ttft, Dispatched: clk.Now().Add(-ttft), InflightAtDispatch: c.Limit()})
	}
	streamed := c.Limit()
	if streamed > 35 {
		t.Fatalf("limit %d after a minute of streams congested above 30", streamed)
	}
	quiet := time.Duration(blindQuiet) * s.Window
	answeredAtFullUse(c, clk, int((quiet-time.Second)/(50*time.Millisecond)), 50*time.Millisecond, 0)
	if got := c.Limit(); got > streamed {
		t.Fatalf("limit %d -> %d within %v of the last stream; the streams' limit must hold that long", streamed, got, quiet)
	}
	answeredAtFullUse(c, clk, 400, 50*time.Millisecond, 0) // 20 s more
	if got := c.Limit(); got != s.Ceiling {
		t.Fatalf("limit %d after %v of non-streaming answers alone, want the ceiling %d", got, quiet+19*time.Second, s.Ceiling)
	}
}
