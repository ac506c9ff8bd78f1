package control

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vtime"
)

// TestDelayCutsToWhatTheProviderServes: a provider whose capacity fell
// from 40 to 16 decodes 15 streams while 30 are in flight. Little's law
// cuts the first congested window by the excess delay x the rate of first
// tokens; the second window that shows the provider queueing cuts to what
// it serves (15 decoding plus the ones in prefill at no load), where
// Little's law alone would hold (a later window of a run cuts by at most
// a quarter). One queueing window is not enough (a host stall looks the
// same for a window), nor is any while whole answers come (they are
// served without a first token).
func TestDelayCutsToWhatTheProviderServes(t *testing.T) {
	run := func(t *testing.T, between func(c *adaptiveController, clk *vtime.Clock)) *adaptiveController {
		c, clk := newDelayCtrl(t, 40, 40)
		for i := 0; i < 4; i++ { // baseline 300 ms at 40 in flight, 39 decoding
			feedWindowDecoding(c, clk, 40, 39, 0, constTTFT(300*time.Millisecond))
		}
		feedWindowDecoding(c, clk, 30, 15, 0, constTTFT(3*time.Second))
		if between != nil {
			between(c, clk)
		}
		feedWindowDecoding(c, clk, 30, 15, 0, constTTFT(3*time.Second))
		return c
	}
	t.Run("two windows in a row", func(t *testing.T) {
		c := run(t, nil)
		// 15 + rate x baseline (2.5/s x 0.3 s), rounded up.
		if got := c.Limit(); got != 16 {
			t.Fatalf("limit %d after two windows of a provider decoding 15 of 30, want 16", got)
		}
	})
	t.Run("without the count", func(t *testing.T) {
		c, clk := newDelayCtrl(t, 40, 40)
		for i := 0; i < 4; i++ {
			feedWindow(c, clk, 40, 0, constTTFT(300*time.Millisecond))
		}
		feedWindow(c, clk, 30, 0, constTTFT(3*time.Second))
		little := c.Limit()
		feedWindow(c, clk, 30, 0, constTTFT(3*time.Second))
		if got := c.Limit(); got != little || got <= 18 {
			t.Fatalf("limit %d after the second window (first %d): Little's law alone, want it held above 18", got, little)
		}
	})
	t.Run("not in a row", func(t *testing.T) {
		c := run(t, func(c *adaptiveController, clk *vtime.Clock) {
			feedWindowDecoding(c, clk, c.Limit(), c.Limit()-1, 0, constTTFT(300*time.Millisecond))
		})
		if got := c.Limit(); got <= 18 {
			t.Fatalf("limit %d: an uncongested window between the two, want no cut to 16", got)
		}
	})
	t.Run("whole answers around", func(t *testing.T) {
		c := run(t, func(c *adaptiveController, clk *vtime.Clock) {
			now := clk.Now()
			c.Observe(Sample{Kind: Answered, Dispatched: now.Add(-time.Second), InflightAtDispatch: 30, Now: now})
		})
		if got := c.Limit(); got <= 18 {
			t.Fatalf("limit %d with whole answers in flight, want no cut to 16", got)
		}
	})
}
