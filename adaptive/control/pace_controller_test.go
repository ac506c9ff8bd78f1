package control_test

// The controller's pacing seen from outside, driven by the scenario the
// tests of adaptive drive their upstreams' controllers with
// (controltest.DrivePacing); an external test package, because
// controltest imports control.

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/controltest"
	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// pacer is an adaptive controller as adaptive sees it: one that may space
// dispatches.
type pacer interface {
	control.Controller
	PaceWait(now time.Time, within time.Duration) (time.Duration, bool)
}

func newPacer(t testing.TB, s settings.Limit, clk *vtime.Clock) pacer {
	t.Helper()
	c, err := control.New(s, clk)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := c.(pacer)
	if !ok {
		t.Fatalf("New(%q) returned %T, which does not pace", s.Algorithm, c)
	}
	return p
}

// paceNow is the wait of a dispatch at now that may wait forever.
func paceNow(c pacer, now time.Time) time.Duration {
	w, _ := c.PaceWait(now, time.Duration(math.MaxInt64))
	return w
}

// TestControllerPacesRateLikeRefusals drives a controller as a provider
// with a request-rate limit does: it accepts requests at a concurrency it
// refused at before (so the refusals are not about concurrency), and then
// refuses again. Dispatches are then spaced; a provider whose refusals
// stay at the top of the concurrency is never paced.
func TestControllerPacesRateLikeRefusals(t *testing.T) {
	clk := vtime.NewClock()
	s := settings.DefaultLimit()
	s.Algorithm = settings.AlgorithmAIMD
	s.Ceiling = 50
	c := newPacer(t, s, clk)
	if w := paceNow(c, clk.Now()); w != 0 {
		t.Fatalf("paced before any refusal: %v", w)
	}
	controltest.DrivePacing(t, c, clk)
	if r := c.State().Pace; r < 2 || r > 4 {
		t.Fatalf("pace %.2f/s after a rate-like refusal, want about 3", r)
	}
	now := clk.Now()
	paceNow(c, now)
	if w := paceNow(c, now); w < 250*time.Millisecond {
		t.Fatalf("a second dispatch at once waits %v, want about a third of a second", w)
	}
}

// BenchmarkPaceWait is an attempt taking its dispatch slot: while not
// pacing (one atomic load) and while pacing (a CAS on the next slot), from
// every core at once.
func BenchmarkPaceWait(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "pacing"
		}
		b.Run(name, func(b *testing.B) {
			clk := vtime.NewClock()
			s := settings.DefaultLimit()
			s.Algorithm, s.Ceiling = settings.AlgorithmGradient2, 50
			c := newPacer(b, s, clk)
			if on {
				controltest.DrivePacing(b, c, clk)
			}
			now := clk.Now()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					c.PaceWait(now, time.Duration(math.MaxInt64))
				}
			})
		})
	}
}
