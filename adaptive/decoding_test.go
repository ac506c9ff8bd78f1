package adaptive

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// TestDecodingCountsStreamsPastFirstToken: the samples a limiter feeds its
// controller carry how many of its requests are past their first token
// (Sample.Decoding): a stream counts from its first FirstToken sample (a
// second one changes nothing) until Finish, whatever the outcome; a whole
// answer never counts. Every count is taken back: the limiter ends at 0.
func TestDecodingCountsStreamsPastFirstToken(t *testing.T) {
	t.Parallel()
	c := &recController{}
	l := testLimiter(10, 0, 0, c)
	a, b, whole := grant(t, l), grant(t, l), grant(t, l)
	a.Observe(control.Sample{Kind: control.FirstToken, TTFT: time.Millisecond})
	a.Observe(control.Sample{Kind: control.FirstToken, TTFT: time.Millisecond})
	b.Observe(control.Sample{Kind: control.FirstToken, TTFT: time.Millisecond})
	b.Observe(control.Sample{Kind: control.TokenRate, Rate: 50})
	whole.Finish(time.Now(), Outcome{Kind: OutcomeSuccess})
	a.Finish(time.Now(), Outcome{Kind: OutcomeDrop, Drop: control.DropOverloaded})
	b.Finish(time.Now(), Outcome{Kind: OutcomeSuccess})

	var got []int
	for _, s := range c.samples {
		got = append(got, s.Decoding)
	}
	// a's first token (1) and its repeat (1: counted once), b's first
	// token (2), b's rate (2), the whole answer (2: it never counted),
	// a's drop (2: fed before a is taken back).
	want := []int{1, 1, 2, 2, 2, 2}
	if len(got) != len(want) {
		t.Fatalf("Decoding per sample %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Decoding per sample %v, want %v", got, want)
		}
	}
	if n := l.decoding.Load(); n != 0 {
		t.Fatalf("decoding = %d after every request finished, want 0", n)
	}
}

// TestDecodingInterleavings: a first token observed while the request is
// being finished on another goroutine (a client that goes away as the
// first token arrives) is counted and taken back exactly once, in every
// order the two can run in.
func TestDecodingInterleavings(t *testing.T) {
	t.Parallel()
	type req struct {
		state, flags atomic.Uint32
		n            atomic.Int64
	}
	observe := func(r *req) { // Permit.Observe after its held check
		if setFlag(&r.flags, flagFirstToken) {
			startDecoding(&r.state, &r.flags, &r.n)
		}
	}
	finish := func(r *req) { // Permit.Finish
		if r.state.CompareAndSwap(permitHeld, permitDone) {
			endDecoding(&r.flags, &r.n)
		}
	}
	for _, c := range []struct {
		name string
		run  func(r *req)
	}{
		{"first token, then finish", func(r *req) { observe(r); finish(r) }},
		{"finish, then the first token", func(r *req) { finish(r); observe(r) }},
		{"counted, finished, then the held check", func(r *req) {
			setFlag(&r.flags, flagFirstToken)
			r.n.Add(1)
			finish(r)
			if r.state.Load() != permitHeld {
				endDecoding(&r.flags, &r.n)
			}
		}},
	} {
		r := &req{}
		r.state.Store(permitHeld)
		c.run(r)
		if n := r.n.Load(); n != 0 {
			t.Errorf("%s: count %d at the end, want 0", c.name, n)
		}
	}
}

// TestDecodingRaceWithFinish runs Observe and Finish of one permit on two
// goroutines, for the race detector, and checks the count comes back.
func TestDecodingRaceWithFinish(t *testing.T) {
	t.Parallel()
	l := testLimiter(10, 0, 0, &recController{})
	for i := 0; i < 200; i++ {
		p := grant(t, l)
		var wg sync.WaitGroup
		wg.Go(func() { p.Observe(control.Sample{Kind: control.FirstToken, TTFT: time.Millisecond}) })
		wg.Go(func() { p.Finish(time.Now(), Outcome{Kind: OutcomeIgnore}) })
		wg.Wait()
		if n := l.decoding.Load(); n != 0 {
			t.Fatalf("round %d: decoding = %d after the race, want 0", i, n)
		}
	}
}

// TestAttemptDecoding: an upstream counts its attempts past their first
// token the same way, for its own controller.
func TestAttemptDecoding(t *testing.T) {
	t.Parallel()
	clk := vtime.NewClock()
	s := fixedUpstreams(t, clk, 4, settings.Upstream{Name: "a", Weight: 1}, settings.Upstream{Name: "b", Weight: 1})
	now := clk.Now()
	x := mustPick(t, s, now, nil, nil, false)
	y := mustPick(t, s, now, nil, nil, false)
	x.Observe(control.Sample{Kind: control.FirstToken, TTFT: time.Millisecond})
	y.Observe(control.Sample{Kind: control.FirstToken, TTFT: time.Millisecond})
	if got := x.Upstream().decoding.Load() + y.Upstream().decoding.Load(); got != 2 {
		t.Fatalf("decoding over both upstreams = %d, want 2", got)
	}
	x.Finish(now, AttemptResult{Outcome: Outcome{Kind: OutcomeSuccess}})
	y.Finish(now, AttemptResult{Outcome: Outcome{Kind: OutcomeIgnore}})
	for _, u := range []*Upstream{x.Upstream(), y.Upstream()} {
		if n := u.decoding.Load(); n != 0 {
			t.Fatalf("%s: decoding = %d after its attempts finished, want 0", u.Name(), n)
		}
	}
}
