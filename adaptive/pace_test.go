package adaptive

import (
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/controltest"
	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// TestAttemptPacing: an attempt that waits for its dispatch slot is not
// counted in flight at its upstream for the samples of the attempts sent
// meanwhile, nor for its own once sent; its count goes back exactly once,
// whether its wait ends (Paced) or it finishes first.
func TestAttemptPacing(t *testing.T) {
	clk := vtime.NewClock()
	l := settings.DefaultLimit()
	l.Algorithm, l.Ceiling = settings.AlgorithmAIMD, 50
	s, err := NewUpstreamSet(clk, l, settings.DefaultBreaker(), []settings.Upstream{{Name: "a", Weight: 1}}, true)
	if err != nil {
		t.Fatal(err)
	}
	u := s.Upstreams()[0]
	controltest.DrivePacing(t, u.ctrl.Load().c, clk)
	now := clk.Now()
	a1, a2, a3 := mustPick(t, s, now, nil, nil, false), mustPick(t, s, now, nil, nil, false), mustPick(t, s, now, nil, nil, false)
	if w := attemptPace(a1, now); w != 0 {
		t.Fatalf("first attempt waits %v", w)
	}
	w2, w3 := attemptPace(a2, now), attemptPace(a3, now)
	if w2 <= 0 || w3 <= w2 {
		t.Fatalf("waits %v and %v, want two growing waits", w2, w3)
	}
	if n := u.pacing.Load(); n != 2 {
		t.Fatalf("%d attempts counted waiting, want 2", n)
	}
	// a3 finishes (its client left) before its slot: its count goes back
	// once, and a second Paced does nothing.
	a3.Finish(now, AttemptResult{Failure: AttemptCanceled})
	a3.Paced(now)
	if n := u.pacing.Load(); n != 1 {
		t.Fatalf("%d attempts counted waiting after one finished, want 1", n)
	}
	at := now.Add(w2)
	a2.Paced(at)
	a2.Paced(at)
	if n := u.pacing.Load(); n != 0 {
		t.Fatalf("%d attempts counted waiting after the last was sent, want 0", n)
	}
	if a2.start != at || a2.inflight != 2 {
		t.Fatalf("paced attempt dispatched at %v with %d in flight, want %v and 2", a2.start.Sub(now), a2.inflight, w2)
	}
	a1.Finish(at, okResult)
	a2.Finish(at, okResult)
	if n := u.inflight.Load(); n != 0 {
		t.Fatalf("%d attempts in flight at the end", n)
	}
}

const forever = time.Duration(math.MaxInt64)

func attemptPace(a *Attempt, now time.Time) time.Duration {
	w, _ := a.Pace(now, forever)
	return w
}
