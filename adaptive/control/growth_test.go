package control

import (
	"math"
	"testing"
	"time"
)

// busyWindow is an uncongested window whose load used the whole limit
// est, without token-rate samples (so no throughput guard and no
// "faster" evidence).
func busyWindow(est float64) windowStats {
	return windowStats{median: 300 * time.Millisecond, n: 5, meanInflight: est, maxInflight: int(est)}
}

// A limit cut from 42 to 38.9 climbs back by +1, +2 and then a
// sqrt(limit) step, which stops at 42, the limit of the cut: the
// uncongested windows below it say nothing about room above it. From 42
// the probe goes +2 before the sqrt(limit) steps again. Counted as one
// streak, the same windows took the limit from 41.9 to 48.4, past the
// level where the provider had just been seen congested.
func TestDelayProbeStopsAtTheLimitOfTheLastCut(t *testing.T) {
	c, _ := newDelayCtrl(t, 42, 100)
	p := c.delay
	p.known, p.est, p.eff = 42, 42, 100
	p.setCut(38.9)
	if p.over != 42 || p.known != 38.9 {
		t.Fatalf("after the cut: over %.1f, known %.1f; want 42 and 38.9", p.over, p.known)
	}
	for i, want := range []float64{39.9, 41.9, 42, 44, 44 + math.Sqrt(44)} {
		p.grow(busyWindow(p.est), false)
		if math.Abs(p.est-want) > 1e-9 {
			t.Fatalf("uncongested window %d: limit %.2f, want %.2f", i+1, p.est, want)
		}
	}
}

// Three congested windows in a row that did not take a quarter of the
// load away force that quarter; when the last two also showed the
// provider queueing (20 of 40 past their first token), the cut goes down
// to what it serves instead. A quarter of the load (30) would leave the
// rest to the next window, which after a capacity step down comes
// seconds later.
func TestDelayForcedCutTakesWhatTheProviderServes(t *testing.T) {
	c, clk := newDelayCtrl(t, 40, 40)
	for i := 0; i < 4; i++ { // baseline 300 ms at 40 in flight, 38 decoding
		feedWindowDecoding(c, clk, 40, 38, 0, constTTFT(300*time.Millisecond))
	}
	feedWindowDecoding(c, clk, 40, 38, 0, constTTFT(1300*time.Millisecond)) // congested, not queueing
	feedWindowDecoding(c, clk, 40, 20, 0, constTTFT(1300*time.Millisecond)) // congested, queueing
	if c.delay.run.windows != 2 || c.delay.est < 30 {
		t.Fatalf("setup: run of %d windows, delay part %.1f; want 2 and a cut of less than a quarter", c.delay.run.windows, c.delay.est)
	}
	feedWindowDecoding(c, clk, 40, 20, 0, constTTFT(1300*time.Millisecond)) // the third: forced
	served := math.Ceil(20 + c.delay.rate*c.delay.base)
	if got := c.delay.est; got != served {
		t.Fatalf("forced cut after two windows measured the provider queueing: delay part %.1f, want what it serves, %.0f (a quarter of the load: 30)", got, served)
	}
}
