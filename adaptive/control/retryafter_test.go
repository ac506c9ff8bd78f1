package control

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// An upstream's Retry-After freezes limit growth for at most MaxRetryAfter,
// however large it is (the audit saw "Retry-After: 999999999" freeze growth
// until 2058), and growth resumes once the capped freeze is over.
func TestRetryAfterCapped(t *testing.T) {
	t.Parallel()
	for _, algo := range []string{settings.AlgorithmAIMD, settings.AlgorithmGradient2} {
		for _, ra := range []time.Duration{999999999 * time.Second, math.MaxInt64} {
			t.Run(algo+"/"+ra.String(), func(t *testing.T) {
				t.Parallel()
				clk := vtime.NewClock()
				s := settings.DefaultLimit()
				s.Algorithm = algo
				s.WindowSamples = 1
				c := newCtrlForTest(t, s, clk)
				clk.Advance(time.Second)
				c.Observe(ctrlDrop(clk.Now(), 20, ra))
				frozen := c.Limit()
				if want := clk.At(time.Second + MaxRetryAfter); !c.State().FrozenUntil.Equal(want) {
					t.Fatalf("FrozenUntil = %v, want the drop time + MaxRetryAfter (%v)", c.State().FrozenUntil, want)
				}
				// Inside the capped freeze: no growth.
				clk.Advance(MaxRetryAfter - time.Second)
				if got := c.Observe(ctrlSuccess(clk, c.Limit(), 300*time.Millisecond)); got > frozen {
					t.Fatalf("limit grew to %d inside the freeze", got)
				}
				// After it: growth resumes.
				clk.Advance(2 * time.Second)
				for i := 0; i < 200; i++ {
					clk.Advance(50 * time.Millisecond)
					c.Observe(ctrlSuccess(clk, c.Limit(), 300*time.Millisecond))
				}
				if got := c.Limit(); got <= frozen {
					t.Fatalf("limit %d after MaxRetryAfter, want growth above %d", got, frozen)
				}
			})
		}
	}
}

// A negative Retry-After is no freeze.
func TestCapRetryAfterNegative(t *testing.T) {
	t.Parallel()
	if got := capRetryAfter(-time.Second); got != 0 {
		t.Fatalf("capRetryAfter(-1s) = %v, want 0", got)
	}
}
