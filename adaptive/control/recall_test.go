package control

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vtime"
)

// fallTo40Then20 runs a controller at a capacity of 40 (baseline 300 ms,
// streams at 25 tokens/s), then through a capacity fall that cuts the
// limit (congested windows at full use), then an uncongested window at
// the lower limit: the fall is over.
func fallTo40Then20(t *testing.T) (*adaptiveController, *vtime.Clock, int) {
	t.Helper()
	c, clk := newDelayCtrl(t, 40, 60)
	for i := 0; i < 6; i++ {
		feedWindow(c, clk, 40, 25, constTTFT(300*time.Millisecond))
		c.delay.est = 40 // the capacity: growth above it is not this test's
		c.delay.known = 40
	}
	before := int(c.delay.est)
	// The capacity falls to 20: every request above it queues (100 ms
	// each), so less load answers.
	for i := 0; i < 8 && c.Limit() > 22; i++ {
		feedWindow(c, clk, c.Limit(), 25, constTTFT(300*time.Millisecond+time.Duration(max(0, c.Limit()-20))*100*time.Millisecond))
	}
	feedWindow(c, clk, c.Limit(), 25, constTTFT(300*time.Millisecond))
	if c.Limit() > before*2/3 {
		t.Fatalf("setup: limit %d after the fall, want at most %d", c.Limit(), before*2/3)
	}
	return c, clk, before
}

// feedRates sends n token-rate samples of streams dispatched at load,
// 50 ms apart.
func feedRates(c *adaptiveController, clk *vtime.Clock, n, load int, rate float64) {
	feedRatesEvery(c, clk, 50*time.Millisecond, n, load, rate)
}

func feedRatesEvery(c *adaptiveController, clk *vtime.Clock, every time.Duration, n, load int, rate float64) {
	for i := 0; i < n; i++ {
		clk.Advance(every)
		c.Observe(Sample{Kind: TokenRate, Rate: rate, Dispatched: clk.Now().Add(-time.Second), InflightAtDispatch: load, Now: clk.Now()})
	}
}

// When streams decode faster at no less load after a capacity fall (the
// capacity came back), the limit doubles within two blocks of token-rate
// samples, without waiting for a window, and never past the estimate from
// before the fall.
func TestDelayRecallsCapacityWhenStreamsSpeedUp(t *testing.T) {
	c, clk, before := fallTo40Then20(t)
	low := c.Limit()
	feedRates(c, clk, recallSamples-1, low, 33)
	if got := c.Limit(); got != low {
		t.Fatalf("after %d fast samples: limit %d, want %d (one block decides nothing)", recallSamples-1, got, low)
	}
	feedRates(c, clk, recallSamples*recallBlocks, low, 33)
	want := min(2*low, before)
	if got := c.Limit(); got < want-1 || got > before {
		t.Fatalf("after %d more fast samples: limit %d, want %d (doubled from %d, at most the %d before the fall)", recallSamples*recallBlocks, got, want, low, before)
	}
}

// Fast samples that all arrive within a second (what a stalled host's
// late tokens look like), one block of fast samples followed by one at the
// old speed, fast samples at less load, and fast samples without a fall
// before them move nothing.
func TestDelayRecallNeedsFasterAtNoLessLoad(t *testing.T) {
	c, clk, _ := fallTo40Then20(t)
	low := c.Limit()
	feedRatesEvery(c, clk, 10*time.Millisecond, recallSamples*recallBlocks, low, 40)
	feedRates(c, clk, recallSamples, low, 25)
	if got := c.Limit(); got != low {
		t.Fatalf("after %d fast samples within %v: limit %d, want %d", recallSamples*recallBlocks, 10*time.Millisecond*recallSamples*recallBlocks, got, low)
	}
	feedRates(c, clk, recallSamples, low, 40)
	feedRates(c, clk, recallSamples, low, 25)
	feedRates(c, clk, recallSamples, low, 40)
	if got := c.Limit(); got != low {
		t.Fatalf("after fast, slow, fast blocks: limit %d, want %d", got, low)
	}
	feedRates(c, clk, 4*recallSamples, low/2, 40)
	if got := c.Limit(); got != low {
		t.Fatalf("after fast samples at half the load: limit %d, want %d", got, low)
	}
	// Judging the blocks allocates nothing (a sample per 32 output tokens
	// of every stream).
	if a := testing.AllocsPerRun(200, func() { feedRates(c, clk, 1, low, 25) }); a != 0 {
		t.Fatalf("a token-rate sample while a recall is live: %.1f allocations, want 0", a)
	}
	if c.delay.recall == 0 {
		t.Fatal("the recall was dropped without a faster block")
	}

	clk2 := vtime.NewClock()
	s := delayTestSettings()
	s.Initial, s.Ceiling = 40, 50
	c2 := newCtrlForTest(t, s, clk2)
	for i := 0; i < 6; i++ {
		feedWindow(c2, clk2, 20, 25, constTTFT(300*time.Millisecond))
	}
	at := c2.Limit()
	feedRates(c2, clk2, 4*recallSamples, at, 40)
	if got := c2.Limit(); got != at {
		t.Fatalf("no fall: limit %d after fast samples, want %d", got, at)
	}
}

// The remembered capacity ages from the latest fall from it, not the
// first: a limit that fell from 41 in the cold start's settling, ran at
// about 41 again and fell from there to 20 at 80 s still remembers 41 when
// it falls again two minutes after the first fall, and a capacity coming
// back is recalled to it.
func TestDelayRecallAgesFromLatestFall(t *testing.T) {
	c, _ := newDelayCtrl(t, 20, 60)
	p := c.delay
	t0 := p.clock
	at := func(d time.Duration) { p.clock = t0.Add(d) }

	at(10 * time.Second)
	p.known = 41
	p.congestionSignal(36) // the cold start's settling
	if p.recall != 41 {
		t.Fatalf("after the first fall: recall %.1f, want 41", p.recall)
	}
	at(80 * time.Second)
	p.known = 40.5 // back at the level, then the capacity halves
	p.congestionSignal(30)
	at(90 * time.Second)
	p.congestionSignal(20)
	at(170 * time.Second) // 160 s after the first fall, 90 s after the latest from 40.5
	p.known = 21
	p.congestionSignal(19)
	if p.recall != 41 || !p.recallAt.Equal(t0.Add(80*time.Second)) {
		t.Fatalf("recall %.1f set at %v, want 41 from the fall at 80s", p.recall, p.recallAt.Sub(t0))
	}
	// Falls within the low level do not renew it: past recallFor from the
	// fall at 80 s the memory is gone.
	at(80*time.Second + recallFor + time.Second)
	p.known = 21
	p.congestionSignal(19)
	if p.recall != 21 {
		t.Fatalf("recallFor after the latest fall from 41: recall %.1f, want 21 (the level this fall came from)", p.recall)
	}
}

// A capacity that comes back lifts the loss part with the delay part: the
// refusals of the fall, older than boundMemory cool-downs, no longer hold
// the limit below the recalled capacity. A refusal within them does.
func TestLossLiftedWhenCapacityRecalled(t *testing.T) {
	for _, recent := range []bool{false, true} {
		c, clk := newDelayCtrl(t, 40, 60)
		for i := 0; i < 6; i++ {
			feedWindow(c, clk, 40, 25, constTTFT(300*time.Millisecond))
			c.delay.est = 40
		}
		refuse := func(inflight int) {
			now := clk.Now()
			c.Observe(Sample{Kind: Dropped, Drop: DropOverloaded, Dispatched: now, InflightAtDispatch: inflight, Now: now})
		}
		// The capacity falls to 20: the provider refuses at 36 in flight,
		// then every request above 20 queues (100 ms each).
		at20 := func() {
			feedWindow(c, clk, c.Limit(), 25, constTTFT(300*time.Millisecond+time.Duration(max(0, c.Limit()-20))*100*time.Millisecond))
		}
		refuse(36)
		for i := 0; i < 8 && c.Limit() > 22; i++ {
			at20()
		}
		// At the low capacity for longer than boundMemory cool-downs.
		for clk.Now().Sub(c.lastDrop) <= boundMemory*c.s.Cooldown+c.s.Window {
			at20()
		}
		low := c.Limit()
		if low > 22 || c.loss.value() >= 39 {
			t.Fatalf("setup: limit %d, loss part %d after the fall; want at most 22 and below 39", low, c.loss.value())
		}
		if recent {
			refuse(low + 1) // the provider refused again, just now
		}
		lossBefore := c.loss.value()
		// The block being filled when the capacity came back holds
		// samples from before it, and may read no faster: up to one
		// block more than recallBlocks.
		feedRates(c, clk, recallSamples*(recallBlocks+1), low, 33)
		got := c.Limit()
		switch {
		case !recent && got < 39:
			t.Fatalf("capacity back after quiet: limit %d (loss part %d, was %d), want the 40 from before the fall", got, c.loss.value(), lossBefore)
		case recent && (got > max(lossBefore, low)+1 || c.loss.value() > lossBefore+1):
			// The loss part's own additive increase over the samples (+1)
			// is allowed; a lift to the recalled capacity is not.
			t.Fatalf("capacity back right after a refusal: limit %d, loss part %d, want at most the loss part's %d + 1", got, c.loss.value(), lossBefore)
		}
	}
}

// A window whose streams decode faster than the window before and than the
// baseline's, at no less load, also returns the limit to the level from
// before the fall, at once, when recallOnRate's blocks did not decide (a
// cut of one request just before the capacity came back holds them off
// until an uncongested window, and by then the window before is fast
// too). Before, growth took a sqrt(limit) step per window toward it (20,
// 29, 40: half the provider idle for two windows).
func TestDelayWindowFasterRecallsCapacity(t *testing.T) {
	c, clk, before := fallTo40Then20(t)
	// A window at the low limit, streams at the fall's speed.
	feedWindow(c, clk, c.Limit(), 25, constTTFT(300*time.Millisecond))
	low := c.Limit()
	// The capacity comes back: the next window's streams run faster. One
	// rate sample per first token keeps recallOnRate's blocks unfilled.
	n := c.s.WindowSamples
	step := c.s.Window / time.Duration(n)
	for i := 0; i < n; i++ {
		clk.Advance(step)
		now := clk.Now()
		c.Observe(Sample{Kind: FirstToken, Dispatched: now.Add(-time.Millisecond), InflightAtDispatch: low, TTFT: 300 * time.Millisecond, Now: now})
		for k := 0; k < 2; k++ {
			c.Observe(Sample{Kind: TokenRate, Rate: 33, Dispatched: now.Add(-time.Second), InflightAtDispatch: low, Now: now})
		}
	}
	if got := c.Limit(); got < min(2*low, before)-1 {
		t.Fatalf("after a window of faster streams at the same load: limit %d, want %d (doubled from %d toward the %d before the fall)", got, min(2*low, before), low, before)
	}
}

// The in-flight count at which the provider refused is a bound, not a
// capacity it served: after a cold start's overshoot into a provider that
// queues beyond 40 and refuses beyond 60, the congested window that
// follows (its first tokens from requests dispatched during the climb,
// below the limit now in effect) cuts, and the part must neither keep 60
// as the capacity estimate to slow-start back to nor remember it as the
// level to recall when streams speed up. Before, it did both, and the
// limit went back to 60 every 15 s.
func TestRefusalLevelIsNotACapacity(t *testing.T) {
	c, clk := newDelayCtrl(t, 20, 200)
	feedWindow(c, clk, 20, 0, constTTFT(300*time.Millisecond))
	c.delay.est = 62                             // the cold start's climb, grown per first token
	c.delay.last, c.delay.round = grownFrom{}, 0 // and judged
	c.recompute()
	clk.Advance(10 * time.Millisecond)
	now := clk.Now()
	c.Observe(Sample{Kind: Dropped, Drop: DropOverloaded, InflightAtDispatch: 61, Dispatched: now.Add(-time.Millisecond), Now: now})
	if got := c.Limit(); got != 60 {
		t.Fatalf("setup: limit %d after a refusal at 61 in flight, want 60", got)
	}
	// First tokens of requests dispatched during the climb (at 40-47 in
	// flight) that waited seconds in the provider's queue.
	feedWindow(c, clk, 47, 0, constTTFT(3*time.Second))
	if c.delay.known >= 45 {
		t.Errorf("capacity estimate %.1f after the congested window, want the cut, not the refusal's bound of 60", c.delay.known)
	}
	if c.delay.recall >= 45 {
		t.Errorf("level to recall %.1f, want none near the refusal's bound of 60", c.delay.recall)
	}
	if got := c.Limit(); got >= 60 {
		t.Errorf("limit %d after the congested window, want a cut", got)
	}
}
