package adaptive

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// stepController is a test Controller whose limit the test sets.
type stepController struct{ lim atomic.Int64 }

func (c *stepController) Observe(control.Sample) int { return int(c.lim.Load()) }
func (c *stepController) Limit() int                 { return int(c.lim.Load()) }
func (c *stepController) State() control.State       { return control.State{Limit: c.Limit()} }

// fixedAt is a controller that holds the limit at n, as the fixed
// controller does, without control.New's bounds on n (benchmarks run
// limiters past settings.MaxCeiling).
type fixedAt int

func (c fixedAt) Observe(control.Sample) int { return int(c) }
func (c fixedAt) Limit() int                 { return int(c) }
func (c fixedAt) State() control.State {
	return control.State{Algorithm: settings.AlgorithmFixed, Limit: int(c), Binding: "fixed"}
}

// testLimiter builds a limiter outside a registry: a fixed controller at
// the ceiling unless ctrl is given.
func testLimiter(ceiling, maxWaiting int, maxWait time.Duration, ctrl control.Controller) *Limiter {
	set := settings.DefaultLimit()
	set.Algorithm, set.Ceiling, set.Min, set.Initial = settings.AlgorithmFixed, ceiling, 1, 1
	if ctrl == nil {
		ctrl = fixedAt(ceiling)
	}
	q := settings.DefaultQueue()
	q.MaxWaiting, q.MaxWait = maxWaiting, maxWait
	return newLimiter(LimiterSettings{Limit: set, Queue: q}, ctrl, nil)
}

// grant acquires a permit without waiting, or fails the test.
func grant(t testing.TB, l *Limiter) *Permit {
	t.Helper()
	p := new(Permit)
	if !l.TryAcquire(time.Now(), Flow{}, p) {
		t.Fatal("TryAcquire refused")
	}
	return p
}

// done finishes p with no outcome.
func done(p *Permit) bool { return p.Finish(time.Now(), Outcome{}) }

func TestLimiterCeilingFastPath(t *testing.T) {
	t.Parallel()
	l := testLimiter(2, 0, 0, nil)
	p1, p2 := grant(t, l), grant(t, l)
	if l.TryAcquire(time.Now(), Flow{}, new(Permit)) {
		t.Fatal("third TryAcquire with ceiling 2 succeeded")
	}
	if p1.Inflight() != 1 || p2.Inflight() != 2 {
		t.Fatalf("inflight at grant: %d %d, want 1 2", p1.Inflight(), p2.Inflight())
	}
	done(p1)
	done(p2)
	if s := l.Stats(); s.Inflight != 0 {
		t.Fatalf("inflight after release = %d", s.Inflight)
	}
}

func TestLimiterQueueFullAndTimeout(t *testing.T) {
	t.Parallel()
	l := testLimiter(1, 1, 30*time.Millisecond, nil)
	p := grant(t, l)
	errc := make(chan error, 1)
	go func() { errc <- l.Acquire(time.Now(), Flow{}, nil, new(Permit)) }()
	testutil.Eventually(t, "one waiter", 5*time.Second, func() bool { return l.Stats().Waiting == 1 })
	if err := l.Acquire(time.Now(), Flow{}, nil, new(Permit)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second waiter: err = %v, want ErrQueueFull", err)
	}
	if err := <-errc; !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("waiter: err = %v, want ErrQueueTimeout", err)
	}
	s := l.Stats()
	if s.Waiting != 0 || s.Inflight != 1 || s.RejectedFull != 1 || s.RejectedTimeout != 1 {
		t.Fatalf("stats = %+v", s)
	}
	done(p)
}

func TestLimiterNoQueueRejectsAtOnce(t *testing.T) {
	t.Parallel()
	l := testLimiter(1, 0, time.Second, nil)
	p := grant(t, l)
	if err := l.Acquire(time.Now(), Flow{}, nil, new(Permit)); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err = %v, want ErrQueueFull", err)
	}
	done(p)
}

func TestLimiterFIFOHandOff(t *testing.T) {
	t.Parallel()
	l := testLimiter(1, 10, 10*time.Second, nil)
	p := grant(t, l)
	order := make(chan int, 5)
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			q := new(Permit)
			if err := l.Acquire(time.Now(), Flow{}, nil, q); err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			done(q)
		}(i)
		// enqueue in a known order
		testutil.Eventually(t, "the next waiter queued", 5*time.Second, func() bool { return l.Stats().Waiting == i+1 })
	}
	// A newcomer must not jump the queue while others wait.
	if l.TryAcquire(time.Now(), Flow{}, new(Permit)) {
		t.Fatal("TryAcquire succeeded while requests wait")
	}
	done(p)
	wg.Wait()
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("grant order: got %d, want %d", got, want)
		}
		want++
	}
}

func TestLimiterCancelLeavesQueue(t *testing.T) {
	t.Parallel()
	l := testLimiter(1, 10, time.Minute, nil)
	p := grant(t, l)
	cancel := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- l.Acquire(time.Now(), Flow{}, cancel, new(Permit)) }()
	testutil.Eventually(t, "one waiter", 5*time.Second, func() bool { return l.Stats().Waiting == 1 })
	close(cancel)
	if err := <-errc; !errors.Is(err, ErrCanceled) {
		t.Fatalf("err = %v, want ErrCanceled", err)
	}
	if s := l.Stats(); s.Waiting != 0 || s.Canceled != 1 {
		t.Fatalf("stats = %+v", s)
	}
	done(p)
	if s := l.Stats(); s.Inflight != 0 {
		t.Fatalf("inflight = %d", s.Inflight)
	}
}

func TestLimiterLimitRiseAdmitsWaiters(t *testing.T) {
	t.Parallel()
	c := &stepController{}
	c.lim.Store(1)
	l := testLimiter(10, 10, time.Minute, c)
	p := grant(t, l)
	got := make(chan *Permit, 3)
	for i := 0; i < 3; i++ {
		go func() {
			q := new(Permit)
			if err := l.Acquire(time.Now(), Flow{}, nil, q); err != nil {
				t.Error(err)
			}
			got <- q
		}()
	}
	testutil.Eventually(t, "three waiters", 5*time.Second, func() bool { return l.Stats().Waiting == 3 })
	// No release: only the limit rises.
	c.lim.Store(3)
	p.Observe(control.Sample{Kind: control.FirstToken, TTFT: time.Millisecond})
	for i := 0; i < 2; i++ {
		select {
		case q := <-got:
			defer done(q)
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not admitted after limit rise")
		}
	}
	if s := l.Stats(); s.Inflight != 3 || s.Waiting != 1 || s.Limit != 3 {
		t.Fatalf("stats = %+v, want inflight 3 waiting 1 limit 3", s)
	}
	// Ceiling still binds whatever the controller says.
	c.lim.Store(1000)
	p.Observe(control.Sample{Kind: control.TokenRate, Rate: 10})
	if s := l.Stats(); s.Limit != 10 || s.Binding != BindingCeiling {
		t.Fatalf("limit = %d binding %q, want ceiling 10", s.Limit, s.Binding)
	}
	done(<-got)
	done(p)
}

func TestLimiterLowerCeilingOnReconfigure(t *testing.T) {
	t.Parallel()
	l := testLimiter(4, 0, 0, nil)
	var ps []*Permit
	for i := 0; i < 4; i++ {
		ps = append(ps, grant(t, l))
	}
	set := l.Stats().Settings
	set.Limit.Ceiling = 2
	l.reconfigure(set, nil)
	for _, p := range ps[:2] {
		done(p)
	}
	if l.TryAcquire(time.Now(), Flow{}, new(Permit)) {
		t.Fatal("admitted above the lowered ceiling")
	}
	for _, p := range ps[2:] {
		done(p)
	}
	if !l.TryAcquire(time.Now(), Flow{}, new(Permit)) {
		t.Fatal("not admitted below the lowered ceiling")
	}
}

// TestPermitFinishOnce: whoever calls Finish first releases; every later
// call (and a racing one) does nothing, so in-flight never goes negative
// and the controller hears one outcome.
func TestPermitFinishOnce(t *testing.T) {
	t.Parallel()
	l := testLimiter(1, 0, 0, nil)
	p := grant(t, l)
	if !done(p) {
		t.Fatal("first Finish reported false")
	}
	if done(p) || p.Finish(time.Now(), Outcome{Kind: OutcomeDrop, Drop: control.DropRateLimit}) {
		t.Fatal("second Finish reported true")
	}
	if s := l.Stats(); s.Inflight != 0 {
		t.Fatalf("inflight = %d, want 0", s.Inflight)
	}
	if new(Permit).Finish(time.Now(), Outcome{}) {
		t.Fatal("Finish of a permit never granted reported true")
	}
	// Racing finishers: exactly one wins, in-flight ends at zero.
	for i := 0; i < 200; i++ {
		q := grant(t, l)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Go(func() {
				if done(q) {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("round %d: %d winners", i, wins.Load())
		}
	}
	if s := l.Stats(); s.Inflight != 0 {
		t.Fatalf("inflight = %d after racing finishes", s.Inflight)
	}
}

// recController records the samples it is fed.
type recController struct {
	mu      sync.Mutex
	samples []control.Sample
}

func (c *recController) Observe(s control.Sample) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples = append(c.samples, s)
	return 10
}
func (c *recController) Limit() int           { return 10 }
func (c *recController) State() control.State { return control.State{Limit: 10, Binding: "delay"} }
func (c *recController) kinds() []control.SampleKind {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ks []control.SampleKind
	for _, s := range c.samples {
		ks = append(ks, s.Kind)
	}
	return ks
}

// TestPermitOutcomes: the controller hears each request's outcome once, a
// stream's success at its first token, at most one drop per request, and
// nothing after Finish.
func TestPermitOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		run  func(p *Permit)
		want []control.SampleKind
	}{
		{"answered", func(p *Permit) { p.Finish(time.Now(), Outcome{Kind: OutcomeSuccess}) }, []control.SampleKind{control.Answered}},
		{"stream success", func(p *Permit) {
			p.Observe(control.Sample{Kind: control.FirstToken, TTFT: time.Millisecond})
			p.Observe(control.Sample{Kind: control.TokenRate, Rate: 50})
			p.Finish(time.Now(), Outcome{Kind: OutcomeSuccess})
		}, []control.SampleKind{control.FirstToken, control.TokenRate}},
		{"drop", func(p *Permit) { p.Finish(time.Now(), Outcome{Kind: OutcomeDrop, Drop: control.DropOverloaded}) }, []control.SampleKind{control.Dropped}},
		{"drop mid-stream then at end", func(p *Permit) {
			p.Observe(control.Sample{Kind: control.Dropped, Drop: control.DropTimeout})
			p.Observe(control.Sample{Kind: control.Dropped, Drop: control.DropTimeout})
			p.Finish(time.Now(), Outcome{Kind: OutcomeDrop, Drop: control.DropTimeout})
		}, []control.SampleKind{control.Dropped}},
		{"ignore", func(p *Permit) { p.Finish(time.Now(), Outcome{}) }, nil},
		{"observe after finish", func(p *Permit) {
			p.Finish(time.Now(), Outcome{})
			if p.Observe(control.Sample{Kind: control.FirstToken, TTFT: time.Millisecond}) {
				t.Error("Observe after Finish reported true")
			}
		}, nil},
	}
	for _, tc := range cases {
		c := &recController{}
		l := testLimiter(10, 0, 0, c)
		p := grant(t, l)
		tc.run(p)
		got := c.kinds()
		if len(got) != len(tc.want) {
			t.Errorf("%s: samples %v, want %v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: samples %v, want %v", tc.name, got, tc.want)
			}
		}
		for _, s := range c.samples {
			if s.InflightAtDispatch != 1 || s.Dispatched.IsZero() {
				t.Errorf("%s: sample %+v lacks the permit's dispatch data", tc.name, s)
			}
		}
		if s := l.Stats(); s.Inflight != 0 {
			t.Errorf("%s: inflight %d", tc.name, s.Inflight)
		}
	}
}

// TestLimiterStress: many goroutines acquire (random tenants, classes,
// costs, retries, a tenant cap, fewer tenants tracked than used), hold,
// finish with settled usage, time out and cancel at random while the limit
// moves; in-flight never exceeds the effective limit's maximum and
// everything returns to zero.
func TestLimiterStress(t *testing.T) {
	t.Parallel()
	c := &stepController{}
	c.lim.Store(5)
	const ceiling = 8
	l := testLimiter(ceiling, 50, 2*time.Millisecond, c)
	set := *l.set.Load()
	set.Queue = queueSettings(50, 2*time.Millisecond)
	set.Queue.TenantMaxInflight = 3
	set.Queue.MaxTenants = 4
	l.reconfigure(set, nil)
	var cur, maxSeen atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			var p Permit
			for i := 0; i < 300; i++ {
				var cancel chan struct{}
				if r.IntN(4) == 0 {
					cancel = make(chan struct{})
					close(cancel)
				}
				f := Flow{Tenant: uint64(r.IntN(6)), Class: uint8(r.IntN(4)), MaxOutput: 1 + r.IntN(5000), Retry: r.IntN(4) == 0}
				if err := l.Acquire(time.Now(), f, cancel, &p); err != nil {
					continue
				}
				n := cur.Add(1)
				for {
					m := maxSeen.Load()
					if n <= m || maxSeen.CompareAndSwap(m, n) {
						break
					}
				}
				if r.IntN(10) == 0 {
					c.lim.Store(int64(1 + r.IntN(12)))
					p.Observe(control.Sample{Kind: control.FirstToken})
				}
				if r.IntN(3) == 0 {
					time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				}
				cur.Add(-1)
				p.Finish(time.Now(), Outcome{Tokens: r.IntN(3) * r.IntN(5000)})
			}
		}(uint64(g))
	}
	wg.Wait()
	s := l.Stats()
	if s.Inflight != 0 || s.Waiting != 0 {
		t.Fatalf("after stress: %+v", s)
	}
	if maxSeen.Load() > ceiling {
		t.Fatalf("max in flight %d > ceiling %d", maxSeen.Load(), ceiling)
	}
	for _, c := range s.Classes {
		if c.Inflight != 0 || c.Waiting != 0 {
			t.Fatalf("after stress: class %+v", c)
		}
	}
	l.tenants.each(func(tn *tenant) {
		if w := tn.word.Load(); w != 0 && w != -1 {
			t.Fatalf("after stress: tenant %x holds %d, waits %d", tn.id, tn.held(), tn.waiting())
		}
	})
}

func BenchmarkLimiterAcquireRelease(b *testing.B) {
	// The clock is read once by the proxy per request and passed in; the
	// benchmark measures admission itself: TryAcquire, then Finish with
	// no outcome (release).
	now := time.Now()
	b.Run("serial", func(b *testing.B) {
		l := testLimiter(100, 0, 0, nil)
		var p Permit
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if !l.TryAcquire(now, Flow{}, &p) {
				b.Fatal("rejected")
			}
			p.Finish(now, Outcome{})
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := testLimiter(1<<20, 0, 0, nil)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var p Permit
			for pb.Next() {
				if !l.TryAcquire(now, Flow{}, &p) {
					b.Fatal("rejected")
				}
				p.Finish(now, Outcome{})
			}
		})
	})
}

// TestMaxWaitFor: a request may wait for its client's own deadline (up
// to the larger of max_client_wait and max_wait) or else the queue's
// max_wait, and no longer than what a rate wait left of it; a reload's
// bounds count at once.
func TestMaxWaitFor(t *testing.T) {
	l := testLimiter(1, 10, 10*time.Second, nil)
	for _, tc := range []struct {
		name         string
		flow, budget time.Duration
		want         time.Duration
	}{
		{"queue only", 0, -1, 10 * time.Second},
		{"shorter own deadline", 3 * time.Second, -1, 3 * time.Second},
		{"longer own deadline", 20 * time.Second, -1, 20 * time.Second},
		{"own deadline past max_client_wait", time.Hour, -1, 10 * time.Minute},
		{"budget left", 0, 2 * time.Second, 2 * time.Second},
		{"budget spent", 3 * time.Second, 0, 0},
		{"own deadline under the budget", time.Second, 2 * time.Second, time.Second},
	} {
		if got := l.MaxWaitFor(Flow{MaxWait: tc.flow}, tc.budget); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	set := *l.set.Load()
	set.Queue.MaxWait, set.Queue.MaxClientWait = time.Second, 2*time.Second
	l.reconfigure(set, nil)
	if got := l.MaxWaitFor(Flow{MaxWait: 3 * time.Second}, -1); got != 2*time.Second {
		t.Errorf("after a reload to max_client_wait 2s: %v", got)
	}
	set.Queue.MaxClientWait = 0 // a client's timeout may only shorten max_wait
	l.reconfigure(set, nil)
	if got := l.MaxWaitFor(Flow{MaxWait: 3 * time.Second}, -1); got != time.Second {
		t.Errorf("after a reload to max_client_wait 0: %v", got)
	}
}
