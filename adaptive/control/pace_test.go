package control

import (
	"math"
	"testing"
	"time"
)

// paceAt returns a pace with a 2 s cool-down that saw the provider accept
// rps requests a second, each sent with inflight in flight, for d.
func paceAt(t0 time.Time, rps float64, inflight int, d time.Duration) *dispatchPace {
	p := &dispatchPace{}
	p.init(t0, 2*time.Second)
	step := time.Duration(float64(time.Second) / rps)
	for at := time.Duration(0); at < d; at += step {
		p.accepted(t0.Add(at), inflight)
	}
	return p
}

// pacing3 returns a pace that saw the provider accept 3 requests a
// second at 20 in flight for 20 s and then refuse one sent at 10: it paces
// at about 3 a second from the returned time on.
func pacing3() (*dispatchPace, time.Time) {
	t0 := time.Unix(1000, 0)
	p := paceAt(t0, 3, 20, 20*time.Second)
	now := t0.Add(20 * time.Second)
	p.refusal(now, 10)
	return p, now
}

func TestPaceOffUntilARateLikeRefusal(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := paceAt(t0, 3, 20, 20*time.Second)
	now := t0.Add(20 * time.Second)
	for range 10 {
		if w := waitAny(p, now); w != 0 {
			t.Fatalf("wait %v before any refusal, want 0", w)
		}
	}
	if p.requestsPerSecond() != 0 {
		t.Fatalf("pace %v before any refusal", p.requestsPerSecond())
	}
}

func TestPaceSpacesDispatchesAtTheAcceptedRate(t *testing.T) {
	p, now := pacing3()
	if r := p.requestsPerSecond(); math.Abs(r-3) > 0.1 {
		t.Fatalf("pace %.2f/s after the provider accepted 3/s, want 3", r)
	}
	// Five dispatches at once go out one pace apart (a third of a
	// second).
	gap := time.Duration(float64(time.Second) / p.requestsPerSecond())
	for i := range 5 {
		w := waitAny(p, now)
		if want := time.Duration(i) * gap; w < want-time.Millisecond || w > want+time.Millisecond {
			t.Fatalf("dispatch %d waits %v, want %v", i, w, want)
		}
	}
	// A dispatch long after the last slot goes at once: no burst is saved
	// up while idle.
	later := now.Add(time.Minute)
	if w := waitAny(p, later); w != 0 {
		t.Fatalf("idle, then a dispatch waits %v", w)
	}
	if w := waitAny(p, later); w < gap-time.Millisecond {
		t.Fatalf("second dispatch after idle waits %v, want %v", w, gap)
	}
}

func TestPaceIgnoresRefusalsAtTheTopOfTheConcurrency(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := paceAt(t0, 3, 20, 20*time.Second)
	now := t0.Add(20 * time.Second)
	// Refused with more in flight than any accepted request: that is the
	// provider's concurrency, not its rate.
	p.refusal(now, 21)
	if r := p.requestsPerSecond(); r != 0 {
		t.Fatalf("paced at %.2f/s after a refusal above every accepted concurrency", r)
	}
	if w := waitAny(p, now); w != 0 {
		t.Fatalf("wait %v", w)
	}
}

func TestPaceCutsOncePerCooldownAndOnlyDown(t *testing.T) {
	p, now := pacing3()
	first := p.requestsPerSecond()
	// More acceptances at a higher rate, then a refusal within the
	// cool-down: no change.
	for i := range 10 {
		p.accepted(now.Add(time.Duration(i)*50*time.Millisecond), 10)
	}
	p.refusal(now.Add(time.Second), 10)
	if p.requestsPerSecond() != first {
		t.Fatalf("pace moved within the cool-down: %.2f -> %.2f", first, p.requestsPerSecond())
	}
	// After the cool-down, a refusal never raises the pace, even when
	// more was accepted.
	p.refusal(now.Add(3*time.Second), 10)
	if p.requestsPerSecond() > first {
		t.Fatalf("a refusal raised the pace: %.2f -> %.2f", first, p.requestsPerSecond())
	}
}

func TestPaceProbesWhileItBindsAndRetiresWhenIdle(t *testing.T) {
	p, now := pacing3()
	r0 := p.requestsPerSecond()
	// Two dispatches at once: the second waits, so the pace binds and
	// rises by paceProbe a cool-down later.
	waitAny(p, now)
	waitAny(p, now)
	now = now.Add(2 * time.Second)
	p.tick(now)
	if r := p.requestsPerSecond(); math.Abs(r-r0*paceProbe) > 1e-9 {
		t.Fatalf("binding pace %.3f -> %.3f, want %.3f", r0, r, r0*paceProbe)
	}
	// Not binding: no rise, and it is retired once boundMemory
	// cool-downs passed without a rate-like refusal.
	r1 := p.requestsPerSecond()
	for i := 1; i <= boundMemory+1; i++ {
		p.tick(now.Add(time.Duration(i) * 2 * time.Second))
		if r := p.requestsPerSecond(); r != 0 && r != r1 {
			t.Fatalf("idle pace moved %.3f -> %.3f", r1, r)
		}
	}
	if r := p.requestsPerSecond(); r != 0 {
		t.Fatalf("pace %.2f still on %d cool-downs after the last refusal", r, boundMemory+1)
	}
	if w := waitAny(p, now.Add(time.Hour)); w != 0 {
		t.Fatalf("retired pace still waits %v", w)
	}
}

const forever = time.Duration(math.MaxInt64)

func waitAny(p *dispatchPace, now time.Time) time.Duration {
	w, ok := p.wait(now, forever)
	if !ok {
		panic("a slot beyond forever")
	}
	return w
}

// TestPaceSlotBeyondTheWait: a dispatch that cannot wait as long as its
// slot is told so, and takes no slot: the next dispatch gets it.
func TestPaceSlotBeyondTheWait(t *testing.T) {
	p, now := pacing3()
	gap := time.Duration(float64(time.Second) / p.requestsPerSecond())
	if w, ok := p.wait(now, 0); !ok || w != 0 {
		t.Fatalf("first slot: %v %v, want it now", w, ok)
	}
	if w, ok := p.wait(now, gap/2); ok || w < gap-time.Millisecond {
		t.Fatalf("a dispatch that can wait %v: %v %v, want refused with the wait %v", gap/2, w, ok, gap)
	}
	if w, ok := p.wait(now, gap); !ok || w < gap-time.Millisecond || w > gap+time.Millisecond {
		t.Fatalf("next dispatch: %v %v, want the refused one's slot, %v", w, ok, gap)
	}
}
