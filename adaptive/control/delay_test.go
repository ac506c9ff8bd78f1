package control

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// feedWindow sends one delay window's worth of samples (WindowSamples
// first tokens spread over Window, each dispatched just before it was
// observed with load in flight) and, when rate > 0, as many token-rate
// samples. ttft gives the i-th sample's TTFT. PrefillRate is 0 in these
// tests, so TTFTs are compared as they are.
func feedWindow(c *adaptiveController, clk *vtime.Clock, load int, rate float64, ttft func(i int) time.Duration) {
	feedWindowDecoding(c, clk, load, 0, rate, ttft)
}

// feedWindowDecoding is feedWindow with decoding requests past their first
// token when each first token comes (Sample.Decoding; 0 = not known).
func feedWindowDecoding(c *adaptiveController, clk *vtime.Clock, load, decoding int, rate float64, ttft func(i int) time.Duration) {
	n := c.s.WindowSamples
	if c.delay.ref.empty() {
		n *= 2 // the first window waits for twice the samples
	}
	step := c.s.Window / time.Duration(n)
	first, opened := c.delay.windows == 0, clk.Now()
	for i := 0; i < n; i++ {
		clk.Advance(step)
		now := clk.Now()
		d := ttft(i)
		dispatched := now.Add(-time.Millisecond)
		if first {
			// A cold start: the first window's requests were all sent when
			// it opened (it is open from the first of them).
			dispatched = opened
		}
		c.Observe(Sample{Kind: FirstToken, Dispatched: dispatched, InflightAtDispatch: load, Decoding: decoding, TTFT: d, Now: now})
		for k := 0; rate > 0 && k < 2; k++ { // two streams report a rate per first token
			c.Observe(Sample{Kind: TokenRate, Rate: rate, Dispatched: now.Add(-time.Second), InflightAtDispatch: load, Now: now})
		}
	}
}

func delayTestSettings() settings.Limit {
	s := settings.DefaultLimit()
	s.PrefillRate = 0
	s.Ceiling = 200
	return s
}

// newDelayCtrl returns a gradient2 controller on delayTestSettings with
// the given initial limit and ceiling, and its clock.
func newDelayCtrl(t testing.TB, initial, ceiling int) (*adaptiveController, *vtime.Clock) {
	t.Helper()
	clk := vtime.NewClock()
	s := delayTestSettings()
	s.Initial, s.Ceiling = initial, ceiling
	return newCtrlForTest(t, s, clk), clk
}

func constTTFT(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// The first window is open from the first request it sees, not from when
// Sluice started: traffic that comes seconds after start-up is a cold start
// all the same. Before, that window had already run its length when the
// first tokens came, closed on the first ten (those dispatched first, at
// the lowest in-flight counts), read as a load that did not need the
// limit, and the cold start ended at 20 (with streams of seconds, the
// limit stayed there for 8 s on the wire).
func TestFirstWindowOpensWithItsTraffic(t *testing.T) {
	c, clk := newDelayCtrl(t, 20, 200)
	clk.Advance(5 * time.Second) // Sluice started; no traffic yet
	start := clk.Now()
	// 20 requests dispatched 10 ms apart; the earliest answer first.
	for i := 1; i <= 20; i++ {
		dispatched := start.Add(time.Duration(i) * 10 * time.Millisecond)
		clk.Advance(dispatched.Add(300 * time.Millisecond).Sub(clk.Now()))
		c.Observe(Sample{Kind: FirstToken, Dispatched: dispatched, InflightAtDispatch: i, TTFT: 300 * time.Millisecond, Now: clk.Now()})
	}
	if got := c.Limit(); got < 40 {
		t.Fatalf("after the first 20 requests got their first token: limit %d, want at least 40 (the cold start doubles)", got)
	}
}

// A cold start doubles the limit after its first window, then grows it by
// two per first token while requests use at least half of it (two requests
// out per one answered: the limit doubles per time to first token, not per
// window), never past twice the requests in flight. A window whose load did
// not use the limit its round started at ends the cold start: after it no
// first token grows the limit.
func TestDelaySlowStart(t *testing.T) {
	clk := vtime.NewClock()
	c := newCtrlForTest(t, delayTestSettings(), clk)
	feedWindow(c, clk, c.Limit(), 0, constTTFT(300*time.Millisecond))
	if got := c.Limit(); got != 40 {
		t.Fatalf("after the first window at full use: limit %d, want 40 (doubled)", got)
	}
	firstToken := func(load int) {
		clk.Advance(10 * time.Millisecond)
		now := clk.Now()
		c.Observe(Sample{Kind: FirstToken, Dispatched: now.Add(-time.Millisecond), InflightAtDispatch: load, TTFT: 300 * time.Millisecond, Now: now})
	}
	for i := 1; i <= 3; i++ {
		firstToken(40)
		if got := c.Limit(); got != 40+2*i {
			t.Fatalf("after %d first tokens at 40 in flight: limit %d, want %d (two per first token)", i, got, 40+2*i)
		}
	}
	for i := 0; i < 20; i++ {
		firstToken(40)
	}
	if got := c.Limit(); got != 80 {
		t.Fatalf("after 23 first tokens at 40 in flight: limit %d, want 80 (twice the load, no more)", got)
	}
	clk.Advance(c.s.Window)
	firstToken(40) // closes the window: uncongested, at full use
	if got := c.Limit(); got != 80 {
		t.Fatalf("after the window closed: limit %d, want 80", got)
	}
	// Not at full use (20 in flight of 80): no growth, and the cold start
	// is over.
	feedWindow(c, clk, 20, 0, constTTFT(300*time.Millisecond))
	if got := c.Limit(); got != 80 {
		t.Fatalf("after a window at 20 in flight: limit %d, want 80 (no demand, no growth)", got)
	}
	for i := 0; i < 5; i++ {
		firstToken(80)
	}
	if got := c.Limit(); got != 80 {
		t.Fatalf("first tokens at full use after the cold start: limit %d, want 80 (growth per window only)", got)
	}
}

// Slow start that ends on its throughput guard past the capacity comes
// down to what the provider served: the round from 80 to 160 reached a
// provider serving 120 (the rest queued, streams no faster per request
// than the load allows), so the estimate is about 120, not 160 nor 80.
// Without a count of streams past their first token it stays at 160 and
// probes on from there. Windows of 40 first tokens let a round double
// the limit within one window, and the ceiling of 160 ends the last round
// there.
func TestDelaySlowStartEndsAtWhatTheProviderServes(t *testing.T) {
	for _, known := range []bool{true, false} {
		clk := vtime.NewClock()
		s := delayTestSettings()
		s.Initial, s.Ceiling, s.WindowSamples = 20, 160, 40
		c := newCtrlForTest(t, s, clk)
		dec := func(n int) int {
			if known {
				return n
			}
			return 0
		}
		for _, load := range []int{20, 40, 80} {
			feedWindowDecoding(c, clk, load, dec(load-2), 50, constTTFT(300*time.Millisecond))
		}
		if got := c.Limit(); got != 160 {
			t.Fatalf("setup: limit %d after slow start, want 160", got)
		}
		// 116 decoding at most (and a few in prefill): the provider serves
		// about 120 of the 160; per stream 35 tokens/s instead of 50, so
		// throughput grew by less than 2/3 of the load added.
		feedWindowDecoding(c, clk, 160, dec(116), 35, constTTFT(300*time.Millisecond))
		got := c.Limit()
		// Served: the 116 decoding and those in prefill at no load.
		served := int(math.Ceil(116 + c.delay.rate*c.delay.base))
		switch {
		case known && (got < 116 || got > served+1):
			t.Fatalf("slow start ended past a provider serving about 120: limit %d, want 116-%d (116 decoding, %.1f in prefill, and the probe's +1)", got, served+1, c.delay.rate*c.delay.base)
		case !known && got < 160:
			t.Fatalf("slow start ended without a decoding count: limit %d, want at least 160 (kept)", got)
		}
	}
}

// A congested window cuts by the requests queued inside the provider:
// Little's law, the excess delay x the rate of first tokens.
func TestDelayCutIsLittlesLaw(t *testing.T) {
	c, clk := newDelayCtrl(t, 40, 40)
	for i := 0; i < 4; i++ { // baseline 300 ms at 40 in flight
		feedWindow(c, clk, 40, 0, constTTFT(300*time.Millisecond))
	}
	// 1.3 s: 1 s of queueing. At 40 in flight the provider holds
	// 1 s x rate requests in its queue (rate: first tokens per second, as
	// smoothed after this window).
	feedWindow(c, clk, 40, 0, constTTFT(1300*time.Millisecond))
	rate := c.delay.rate
	want := 40 - 1.0*rate
	if got := c.delay.est; math.Abs(got-want) > 0.01 {
		t.Fatalf("after a window 1 s above the baseline at %.2f first tokens/s: delay part %.2f, want %.2f", rate, got, want)
	}
}

// One congested window in which the provider queues (in flight well
// above the streams it serves) cuts by Little's law; if the provider also
// refused a request while the window was open, halfway from there to what
// it serves: a host stall looks like queueing for a window, but does not
// make the provider refuse.
func TestDelayRefusedQueueingWindowCutsHalfwayToServed(t *testing.T) {
	for _, refused := range []bool{false, true} {
		c, clk := newDelayCtrl(t, 48, 48)
		for i := 0; i < 4; i++ { // baseline 300 ms at 48 in flight, 46 decoding
			feedWindowDecoding(c, clk, 48, 46, 0, constTTFT(300*time.Millisecond))
		}
		if refused {
			// Refused at 48 in flight; the window's requests are then
			// served at 40 (a provider short of capacity, not of rate).
			now := clk.Now()
			c.Observe(Sample{Kind: Dropped, Drop: DropOverloaded, Dispatched: now, InflightAtDispatch: 48, Now: now})
		}
		// 1 s of queueing at 40 in flight, and only 20 past their first
		// token.
		feedWindowDecoding(c, clk, 40, 20, 0, constTTFT(1300*time.Millisecond))
		little := 40 - 1.0*c.delay.rate
		served := math.Ceil(20 + c.delay.rate*c.delay.base)
		want := little
		if refused {
			want = (little + served) / 2
		}
		if got := c.delay.est; math.Abs(got-want) > 0.01 {
			t.Fatalf("refused %v: delay part %.2f after the window, want %.2f (Little's law %.2f, served %.0f)", refused, got, want, little, served)
		}
	}
}

// Noise is not congestion: TTFT jitter of sigma 0.8 (the 90th percentile
// 2.8x the median) at a constant load leaves the limit where it is.
func TestDelayNoiseIsNotCongestion(t *testing.T) {
	c, clk := newDelayCtrl(t, 40, 40)
	rng := rand.New(rand.NewPCG(1, 2))
	noisy := func(int) time.Duration {
		return time.Duration(float64(300*time.Millisecond) * math.Exp(0.8*rng.NormFloat64()))
	}
	low, sum := 40, 0
	for w := 0; w < 200; w++ {
		feedWindow(c, clk, 40, 0, noisy)
		low = min(low, c.Limit())
		sum += c.Limit()
	}
	mean := float64(sum) / 200
	t.Logf("200 windows of lognormal(0.8) TTFT: mean limit %.1f, lowest %d, %d windows read as congested", mean, low, c.delay.congested)
	// The median of five such samples has a heavier upper tail than the
	// normal the band assumes, so a few windows read as congested; their
	// excess is small, and so are Little's-law cuts for it.
	if mean < 39 || low < 35 {
		t.Errorf("noise alone moved the limit: mean %.1f, lowest %d (from 40)", mean, low)
	}
	if c.delay.congested > 20 {
		t.Errorf("%d of 200 noisy windows read as congested, want at most a tenth", c.delay.congested)
	}
}

// Growth must buy throughput: when a step up leaves load x per-stream
// token rate where it was (every stream slower in proportion), the step is
// taken back and the part holds. In a cold start the step is the round
// grown per first token, taken back to where it started.
func TestDelayGrowthMustBuyThroughput(t *testing.T) {
	clk := vtime.NewClock()
	s := delayTestSettings()
	s.Initial = 20
	c := newCtrlForTest(t, s, clk)
	feedWindow(c, clk, 20, 50, constTTFT(300*time.Millisecond)) // slow start: 20 -> 40
	feedWindow(c, clk, 40, 50, constTTFT(300*time.Millisecond)) // a round: two per first token
	if got := c.Limit(); got != 50 {
		t.Fatalf("limit %d, want 50", got)
	}
	// At 50 in flight streams decode at 4/5 of the rate: the same tokens/s.
	feedWindow(c, clk, 50, 40, constTTFT(300*time.Millisecond))
	if got := c.Limit(); got != 50 {
		t.Fatalf("after a round that bought no throughput: limit %d, want it taken back to 50", got)
	}
	for i := 0; i < guardWindows; i++ {
		feedWindow(c, clk, 50, 40, constTTFT(300*time.Millisecond))
		if got := c.Limit(); got != 50 {
			t.Fatalf("window %d after the guard: limit %d, want a hold at 50", i, got)
		}
	}
	// Growth that buys throughput (decode-bound: the rate falls by less).
	feedWindow(c, clk, 50, 40, constTTFT(300*time.Millisecond))
	grown := c.Limit()
	feedWindow(c, clk, grown, 40*50/float64(grown)*1.2, constTTFT(300*time.Millisecond))
	if got := c.Limit(); got <= grown {
		t.Fatalf("a step that bought 20%% more throughput was taken back: limit %d, was %d", got, grown)
	}
}

// A provider that gets slower at the same load (TTFT and token rate, by
// the same factor) is not congested: the baseline is learned again and
// the limit stays.
func TestDelayFollowsSlowerProvider(t *testing.T) {
	c, clk := newDelayCtrl(t, 40, 40)
	for i := 0; i < 5; i++ {
		feedWindow(c, clk, 40, 50, constTTFT(300*time.Millisecond))
	}
	for i := 0; i < 10; i++ {
		feedWindow(c, clk, 40, 25, constTTFT(600*time.Millisecond))
	}
	st := c.State()
	if st.Limit < 38 || st.TTFTBaseline < 500*time.Millisecond {
		t.Fatalf("provider twice as slow at the same load: limit %d, baseline %v; want the limit kept and the baseline at about 600ms", st.Limit, st.TTFTBaseline)
	}
}

// Near the in-flight count at which the provider refused, slower streams
// and a longer TTFT are the provider's queue, not a slower provider: the
// same windows as TestDelayFollowsSlowerProvider, after a refusal at 40
// in flight, keep the baseline and cut the limit.
func TestDelaySlowerNearRefusalIsCongestion(t *testing.T) {
	c, clk := newDelayCtrl(t, 40, 40)
	for i := 0; i < 5; i++ {
		feedWindow(c, clk, 40, 50, constTTFT(300*time.Millisecond))
	}
	clk.Advance(time.Second)
	c.Observe(Sample{Kind: Dropped, Drop: DropOverloaded, Dispatched: clk.Now(), InflightAtDispatch: 40})
	if got := c.loss.refusedAt(clk.Now()); got != 40 {
		t.Fatalf("refusal point %d after a refusal at 40 in flight, want 40", got)
	}
	feedWindow(c, clk, 39, 25, constTTFT(600*time.Millisecond))
	st := c.State()
	if st.TTFTBaseline != 300*time.Millisecond {
		t.Fatalf("baseline %v after a slower window near the refusal point, want 300ms kept (not learned from the queue)", st.TTFTBaseline)
	}
	if st.Delay >= 39 {
		t.Fatalf("delay part %.1f after a window twice the baseline at 39 in flight, want a cut", st.Delay)
	}
}

// A limit one request above the capacity reads congested by a fraction of
// a request window after window, and its own cuts of one answer it: such
// windows count half toward the forced cut of a quarter, so it takes six
// of them, where windows with a request or more queued force it after
// three.
func TestDelayMildRunForcesCutLater(t *testing.T) {
	forcedAfter := func(ttft time.Duration) int {
		c, clk := newDelayCtrl(t, 40, 40)
		for i := 0; i < 5; i++ {
			feedWindow(c, clk, 40, 0, constTTFT(300*time.Millisecond))
		}
		for i := 1; i <= 10; i++ {
			feedWindow(c, clk, 40, 0, constTTFT(ttft))
			if c.Limit() <= 30 {
				return i
			}
		}
		return 0
	}
	// 5 first tokens per 2 s window: 2.5 a second. 340 ms is 0.1 request
	// queued by Little's law, 800 ms 1.25.
	if got := forcedAfter(800 * time.Millisecond); got != 3 {
		t.Errorf("a run a request or more congested forced its cut after %d windows, want 3", got)
	}
	if got := forcedAfter(340 * time.Millisecond); got != 6 {
		t.Errorf("a run congested by a fraction of a request forced its cut after %d windows, want 6", got)
	}
}

// Without token-rate samples, a congested run that less load does not
// answer is also a slower provider: after the run took a quarter of the
// load away twice without the TTFT moving, the baseline is learned again
// and the cuts are undone.
func TestDelayRebasesWhenLessLoadDoesNotHelp(t *testing.T) {
	c, clk := newDelayCtrl(t, 40, 40)
	for i := 0; i < 5; i++ {
		feedWindow(c, clk, 40, 0, constTTFT(300*time.Millisecond))
	}
	low := 40
	for i := 0; i < 12; i++ {
		feedWindow(c, clk, c.Limit(), 0, constTTFT(500*time.Millisecond))
		low = min(low, c.Limit())
	}
	st := c.State()
	t.Logf("lowest limit %d, final %d, baseline %v", low, st.Limit, st.TTFTBaseline)
	if low > 30 {
		t.Fatalf("the run never took a quarter of the load away (lowest limit %d)", low)
	}
	if st.Limit < 38 || st.TTFTBaseline < 450*time.Millisecond {
		t.Fatalf("TTFT unchanged at less load: limit %d, baseline %v; want the cuts undone and the baseline at 500ms", st.Limit, st.TTFTBaseline)
	}
}

// Congestion is answered by less load: the same run with a TTFT that
// falls back when the load does keeps the baseline.
func TestDelayKeepsBaselineWhenLessLoadHelps(t *testing.T) {
	c, clk := newDelayCtrl(t, 40, 40)
	for i := 0; i < 5; i++ {
		feedWindow(c, clk, 40, 0, constTTFT(300*time.Millisecond))
	}
	// Capacity 30: TTFT = 300 ms + 50 ms per request above 30.
	for i := 0; i < 20; i++ {
		n := c.Limit()
		feedWindow(c, clk, n, 0, constTTFT(300*time.Millisecond+time.Duration(max(0, n-30))*50*time.Millisecond))
	}
	st := c.State()
	if st.TTFTBaseline > 330*time.Millisecond || st.Limit > 33 {
		t.Fatalf("capacity 30: limit %d, baseline %v; want the limit near 30 and the baseline kept at 300ms", st.Limit, st.TTFTBaseline)
	}
}

// The baseline is a median of window medians, so the samples it stands
// on are weighed per window: a cold start's first window of 20 samples
// next to one window of 2,000 gives the baseline the standard error of a
// median of about 80 samples, not 2,020. Counted as the total, the band
// around a baseline that the small window's noise had set low was narrow,
// and windows below a capacity of 1,000 read congested until the limit
// had been cut to half of it.
func TestReferenceSamplesWeighSmallWindows(t *testing.T) {
	t.Parallel()
	var r reference
	r.add(refWindow{median: 0.21, n: 20})
	r.add(refWindow{median: 0.25, n: 2000})
	want := 4 / (1.0/20 + 1.0/2000)
	if got := r.samples(); math.Abs(got-want) > 1e-9 {
		t.Fatalf("samples behind a baseline of windows of 20 and 2,000: %.1f, want %.1f", got, want)
	}
}

func TestReferenceSummaries(t *testing.T) {
	var r reference
	if !r.empty() || r.base() != 0 {
		t.Fatal("new reference not empty")
	}
	for i, m := range []float64{0.3, 0.001, 0.32, 0.29, 5} { // two outliers
		r.add(refWindow{median: m, absDev: 0.4, load: float64(10 + i), rate: 40, n: 5})
	}
	if got := r.base(); got != 0.3 {
		t.Errorf("base = %v, want the median of medians 0.3 (outliers ignored)", got)
	}
	if got, want := r.noise(0.5), 1.2533*2.0/25; math.Abs(got-want) > 1e-9 {
		t.Errorf("noise = %v, want pooled %v", got, want)
	}
	if got := r.load(); got != 12 {
		t.Errorf("load = %v, want 12", got)
	}
	for i := 0; i < 2*baseMemory; i++ {
		r.add(refWindow{median: 0.5, n: 5})
	}
	if got := r.base(); got != 0.5 || r.samples() != 5*baseMemory {
		t.Errorf("after %d more windows: base %v, samples %v; want 0.5 and %d (a ring of %d)", 2*baseMemory, got, r.samples(), 5*baseMemory, baseMemory)
	}
	r.reset(refWindow{median: 0.7, n: 3})
	if r.base() != 0.7 || r.samples() != 3 || r.noise(0.5) != 0.35 {
		t.Errorf("after reset: base %v samples %v noise %v", r.base(), r.samples(), r.noise(0.5))
	}
}

func TestBoughtNothing(t *testing.T) {
	for _, c := range []struct {
		before   grownFrom
		load     float64
		rate     float64
		nothing  bool
		describe string
	}{
		{grownFrom{est: 20, load: 20, rate: 50, rates: 20}, 40, 25, true, "twice the load, half the rate"},
		{grownFrom{est: 20, load: 20, rate: 50, rates: 20}, 24, 41.7, true, "20% more load, rate down in proportion"},
		{grownFrom{est: 20, load: 20, rate: 50, rates: 20}, 40, 33, false, "twice the load, a third slower: 32% more throughput"},
		{grownFrom{est: 20, load: 20, rate: 50, rates: 20}, 40, 50, false, "queueing provider: rate unchanged"},
		{grownFrom{est: 20, load: 20, rate: 0}, 40, 25, false, "no rate before"},
		{grownFrom{est: 20, load: 20, rate: 50, rates: minRateSamples - 1}, 40, 25, false, "too few rate samples before to tell"},
		{grownFrom{est: 20, load: 20, rate: 50, rates: 20}, 20.5, 10, false, "load did not grow"},
	} {
		st := windowStats{meanInflight: c.load, rate: c.rate, rates: 20}
		if c.rate == 0 {
			st.rates = 0
		}
		share, ok := throughputShare(c.before, st)
		if got := ok && share < guardShare; got != c.nothing {
			t.Errorf("%s: bought nothing = %v (share %.2f, %v), want %v", c.describe, got, share, ok, c.nothing)
		}
	}
}
