package control

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// warmBaseline returns the baseline a controller learned from four
// uncongested windows of ttft at load 20.
func warmBaseline(t *testing.T, ttft time.Duration) Baseline {
	t.Helper()
	clk := vtime.NewClock()
	c := newCtrlForTest(t, delayTestSettings(), clk)
	if _, ok := c.LearnedBaseline(); ok {
		t.Fatal("a cold controller reported a learned baseline")
	}
	for range 4 {
		feedWindow(c, clk, 20, 50, constTTFT(ttft))
	}
	b, ok := c.LearnedBaseline()
	if !ok {
		t.Fatal("no baseline after four windows")
	}
	return b
}

// A cold controller seeded with a warm one's baseline starts with it, and
// judges its first window against it: a first window run into a queue is
// congestion (cut), not the new baseline, as it is for an unseeded
// controller.
func TestSeedBaselineStartsWarm(t *testing.T) {
	t.Parallel()
	b := warmBaseline(t, 300*time.Millisecond)
	if b.TTFT != 300*time.Millisecond || b.Load != 20 || b.TokenRate != 50 || b.Samples < delayTestSettings().WindowSamples {
		t.Fatalf("published baseline %+v, want 300ms at load 20, 50 tokens/s, a window's samples", b)
	}

	s := delayTestSettings()
	s.Initial = 40
	clk := vtime.NewClock()
	seeded := newCtrlForTest(t, s, clk)
	if !seeded.SeedBaseline(b) {
		t.Fatal("a cold controller refused the seed")
	}
	if got := seeded.State().TTFTBaseline; got != 300*time.Millisecond {
		t.Fatalf("seeded baseline %s before any window, want 300ms", got)
	}
	if seeded.SeedBaseline(b) {
		t.Fatal("a controller with a baseline took a second seed")
	}
	feedWindow(seeded, clk, 40, 0, constTTFT(900*time.Millisecond))
	if got := seeded.Limit(); got >= 40 {
		t.Fatalf("seeded: limit %d after a first window 600 ms above the fleet's baseline, want a cut below 40", got)
	}
	if got := seeded.State().TTFTBaseline; got != 300*time.Millisecond {
		t.Fatalf("seeded: baseline %s after a congested first window, want 300ms kept", got)
	}

	clk2 := vtime.NewClock()
	cold := newCtrlForTest(t, s, clk2)
	feedWindow(cold, clk2, 40, 0, constTTFT(900*time.Millisecond))
	if got := cold.State().TTFTBaseline; got != 900*time.Millisecond {
		t.Fatalf("unseeded: baseline %s, want the first window's 900ms (what seeding avoids)", got)
	}
}

// A seed that is too high is outvoted by the replica's own windows: the
// baseline is the median of the accepted windows, the seed one of them.
func TestSeedBaselineReplacedByOwnWindows(t *testing.T) {
	t.Parallel()
	clk := vtime.NewClock()
	c := newCtrlForTest(t, delayTestSettings(), clk)
	if !c.SeedBaseline(Baseline{TTFT: time.Second, Noise: 100 * time.Millisecond, Load: 10, Samples: 20}) {
		t.Fatal("seed refused")
	}
	for range 3 {
		feedWindow(c, clk, 10, 0, constTTFT(400*time.Millisecond))
	}
	if got := c.State().TTFTBaseline; got != 400*time.Millisecond {
		t.Fatalf("baseline %s after three own windows of 400ms and a 1s seed, want 400ms", got)
	}
	for range baseMemory {
		feedWindow(c, clk, 10, 0, constTTFT(400*time.Millisecond))
	}
	for i := 0; i < c.delay.ref.size; i++ {
		if m := c.delay.ref.ring[i].median; m != 0.4 {
			t.Fatalf("after %d own windows the reference still holds a window of %.3fs", baseMemory+3, m)
		}
	}
}

// A seed that is too low (this replica sees a slower provider than the
// fleet, say through a longer path) reads every own window as congested;
// less load does not answer, so the baseline is learned again from the
// replica's own windows and the cuts are undone.
func TestSeedBaselineTooLowIsRelearned(t *testing.T) {
	t.Parallel()
	s := delayTestSettings()
	s.Initial, s.Ceiling = 40, 40
	clk := vtime.NewClock()
	c := newCtrlForTest(t, s, clk)
	if !c.SeedBaseline(Baseline{TTFT: 100 * time.Millisecond, Noise: 10 * time.Millisecond, Load: 40, Samples: 20}) {
		t.Fatal("seed refused")
	}
	for i := range 20 {
		feedWindow(c, clk, c.Limit(), 0, constTTFT(300*time.Millisecond))
		if c.State().TTFTBaseline == 300*time.Millisecond {
			t.Logf("relearned after %d windows; limit %d", i+1, c.Limit())
			break
		}
	}
	if got := c.State().TTFTBaseline; got != 300*time.Millisecond {
		t.Fatalf("baseline %s after 20 windows of an unanswering 300ms, want the own 300ms", got)
	}
	for range 6 {
		feedWindow(c, clk, c.Limit(), 0, constTTFT(300*time.Millisecond))
	}
	if got := c.Limit(); got < 30 {
		t.Fatalf("limit %d after relearning, want the cuts undone (>= 30 of 40)", got)
	}
}

// Seeds are refused where there is nothing to seed or nothing sane to
// seed with.
func TestSeedBaselineRefused(t *testing.T) {
	t.Parallel()
	good := Baseline{TTFT: 300 * time.Millisecond, Noise: 50 * time.Millisecond, Load: 10, Samples: 20}
	sp := delayTestSettings()
	sp.TTFTTarget = time.Second
	if newCtrlForTest(t, sp, vtime.NewClock()).SeedBaseline(good) {
		t.Error("a set-point controller took a seed")
	}
	aimd := settings.DefaultLimit()
	aimd.Algorithm = settings.AlgorithmAIMD
	if newCtrlForTest(t, aimd, vtime.NewClock()).SeedBaseline(good) {
		t.Error("an AIMD controller took a seed")
	}
	for _, b := range []Baseline{{}, {TTFT: -1, Samples: 1}, {TTFT: 2 * time.Hour, Samples: 1}, {TTFT: time.Second}, {TTFT: time.Second, Samples: 1, Load: -1}} {
		if newCtrlForTest(t, delayTestSettings(), vtime.NewClock()).SeedBaseline(b) {
			t.Errorf("seed %+v taken", b)
		}
	}
	fixed, err := New(settings.Limit{Algorithm: settings.AlgorithmFixed, Ceiling: 10, Min: 1, Initial: 10}, vtime.NewClock())
	if err == nil {
		if _, ok := fixed.(interface{ SeedBaseline(Baseline) bool }); ok {
			t.Error("the fixed controller shares a baseline")
		}
	}
}

func TestMedianBaseline(t *testing.T) {
	t.Parallel()
	got := MedianBaseline([]Baseline{
		{TTFT: 300 * time.Millisecond, Noise: 10, Load: 5, Samples: 10},
		{TTFT: 10 * time.Second, Noise: 30, Load: 50, Samples: 30},
		{TTFT: 310 * time.Millisecond, Noise: 20, Load: 6, Samples: 20},
	})
	want := Baseline{TTFT: 310 * time.Millisecond, Noise: 20, Load: 6, Samples: 20}
	if got != want {
		t.Fatalf("median %+v, want %+v", got, want)
	}
	if (MedianBaseline(nil) != Baseline{}) {
		t.Fatal("median of none is not zero")
	}
}
