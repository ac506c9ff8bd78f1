package adaptive

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stepController is a test Controller whose limit the test sets.
type stepController struct{ lim atomic.Int64 }

func (c *stepController) Observe(Sample) int     { return int(c.lim.Load()) }
func (c *stepController) Limit() int             { return int(c.lim.Load()) }
func (c *stepController) State() ControllerState { return ControllerState{Limit: c.Limit()} }

func TestLimiterCeilingFastPath(t *testing.T) {
	l := NewLimiter(Options{Ceiling: 2})
	p1, ok1 := l.TryAcquire(time.Now())
	p2, ok2 := l.TryAcquire(time.Now())
	_, ok3 := l.TryAcquire(time.Now())
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("TryAcquire with ceiling 2: got %v %v %v, want true true false", ok1, ok2, ok3)
	}
	if p1.Inflight != 1 || p2.Inflight != 2 {
		t.Fatalf("inflight at grant: %d %d, want 1 2", p1.Inflight, p2.Inflight)
	}
	l.Release(p1, time.Now())
	l.Release(p2, time.Now())
	if s := l.Stats(); s.Inflight != 0 {
		t.Fatalf("inflight after release = %d", s.Inflight)
	}
}

func TestLimiterQueueFullAndTimeout(t *testing.T) {
	l := NewLimiter(Options{Ceiling: 1, MaxWaiting: 1, MaxWait: 30 * time.Millisecond})
	p, _ := l.TryAcquire(time.Now())
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(time.Now(), nil); done <- err }()
	waitFor(t, func() bool { return l.Stats().Waiting == 1 })
	if _, err := l.Acquire(time.Now(), nil); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second waiter: err = %v, want ErrQueueFull", err)
	}
	if err := <-done; !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("waiter: err = %v, want ErrQueueTimeout", err)
	}
	s := l.Stats()
	if s.Waiting != 0 || s.Inflight != 1 || s.RejectedFull != 1 || s.RejectedTimeout != 1 {
		t.Fatalf("stats = %+v", s)
	}
	l.Release(p, time.Now())
}

func TestLimiterNoQueueRejectsAtOnce(t *testing.T) {
	l := NewLimiter(Options{Ceiling: 1, MaxWaiting: 0, MaxWait: time.Second})
	p, _ := l.TryAcquire(time.Now())
	if _, err := l.Acquire(time.Now(), nil); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("err = %v, want ErrQueueFull", err)
	}
	l.Release(p, time.Now())
}

func TestLimiterFIFOHandOff(t *testing.T) {
	l := NewLimiter(Options{Ceiling: 1, MaxWaiting: 10, MaxWait: 10 * time.Second})
	p, _ := l.TryAcquire(time.Now())
	order := make(chan int, 5)
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			q, err := l.Acquire(time.Now(), nil)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			order <- i
			l.Release(q, time.Now())
		}(i)
		// enqueue in a known order
		waitFor(t, func() bool { return l.Stats().Waiting == i+1 })
	}
	// A newcomer must not jump the queue while others wait.
	if _, ok := l.TryAcquire(time.Now()); ok {
		t.Fatal("TryAcquire succeeded while requests wait")
	}
	l.Release(p, time.Now())
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
	l := NewLimiter(Options{Ceiling: 1, MaxWaiting: 10, MaxWait: time.Minute})
	p, _ := l.TryAcquire(time.Now())
	cancel := make(chan struct{})
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(time.Now(), cancel); done <- err }()
	waitFor(t, func() bool { return l.Stats().Waiting == 1 })
	close(cancel)
	if err := <-done; !errors.Is(err, ErrCanceled) {
		t.Fatalf("err = %v, want ErrCanceled", err)
	}
	if s := l.Stats(); s.Waiting != 0 || s.Canceled != 1 {
		t.Fatalf("stats = %+v", s)
	}
	l.Release(p, time.Now())
	if s := l.Stats(); s.Inflight != 0 {
		t.Fatalf("inflight = %d", s.Inflight)
	}
}

func TestLimiterLimitRiseAdmitsWaiters(t *testing.T) {
	c := &stepController{}
	c.lim.Store(1)
	l := NewLimiter(Options{Ceiling: 10, MaxWaiting: 10, MaxWait: time.Minute, Controller: c})
	p, _ := l.TryAcquire(time.Now())
	got := make(chan Permit, 3)
	for i := 0; i < 3; i++ {
		go func() {
			q, err := l.Acquire(time.Now(), nil)
			if err != nil {
				t.Error(err)
			}
			got <- q
		}()
	}
	waitFor(t, func() bool { return l.Stats().Waiting == 3 })
	// No release: only the limit rises.
	c.lim.Store(3)
	l.Observe(p, Sample{Kind: FirstToken, TTFT: time.Millisecond})
	for i := 0; i < 2; i++ {
		select {
		case q := <-got:
			defer l.Release(q, time.Now())
		case <-time.After(5 * time.Second):
			t.Fatal("waiter not admitted after limit rise")
		}
	}
	if s := l.Stats(); s.Inflight != 3 || s.Waiting != 1 || s.Limit != 3 {
		t.Fatalf("stats = %+v, want inflight 3 waiting 1 limit 3", s)
	}
	// Ceiling still binds whatever the controller says.
	c.lim.Store(1000)
	l.Observe(p, Sample{Kind: FirstToken})
	if s := l.Stats(); s.Limit != 10 {
		t.Fatalf("limit = %d, want ceiling 10", s.Limit)
	}
	q := <-got
	l.Release(q, time.Now())
	l.Release(p, time.Now())
}

func TestLimiterLowerCeilingOnReconfigure(t *testing.T) {
	l := NewLimiter(Options{Ceiling: 4})
	var ps []Permit
	for i := 0; i < 4; i++ {
		p, ok := l.TryAcquire(time.Now())
		if !ok {
			t.Fatal("acquire")
		}
		ps = append(ps, p)
	}
	l.Reconfigure(Options{Ceiling: 2})
	for _, p := range ps[:2] {
		l.Release(p, time.Now())
	}
	if _, ok := l.TryAcquire(time.Now()); ok {
		t.Fatal("admitted above the lowered ceiling")
	}
	for _, p := range ps[2:] {
		l.Release(p, time.Now())
	}
	if _, ok := l.TryAcquire(time.Now()); !ok {
		t.Fatal("not admitted below the lowered ceiling")
	}
}

func TestLimiterReleaseTooOftenPanics(t *testing.T) {
	l := NewLimiter(Options{Ceiling: 1})
	p, _ := l.TryAcquire(time.Now())
	l.Release(p, time.Now())
	defer func() {
		if recover() == nil {
			t.Fatal("second release did not panic")
		}
	}()
	l.Release(p, time.Now())
}

// TestLimiterStress: many goroutines acquire, hold, release, time out and
// cancel at random while the limit moves; in-flight never exceeds the
// effective limit's maximum and everything returns to zero.
func TestLimiterStress(t *testing.T) {
	c := &stepController{}
	c.lim.Store(5)
	const ceiling = 8
	l := NewLimiter(Options{Ceiling: ceiling, MaxWaiting: 50, MaxWait: 2 * time.Millisecond, Controller: c})
	var cur, maxSeen atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 1))
			for i := 0; i < 300; i++ {
				var cancel chan struct{}
				if r.IntN(4) == 0 {
					cancel = make(chan struct{})
					close(cancel)
				}
				p, err := l.Acquire(time.Now(), cancel)
				if err != nil {
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
					l.Observe(p, Sample{Kind: FirstToken})
				}
				if r.IntN(3) == 0 {
					time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				}
				cur.Add(-1)
				l.Release(p, time.Now())
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
}

func TestRetryAfterSuggestion(t *testing.T) {
	l := NewLimiter(Options{Ceiling: 2})
	if got := l.RetryAfter(); got != time.Second {
		t.Fatalf("no history: %v, want 1s", got)
	}
	p, _ := l.TryAcquire(time.Now())
	p.Granted = time.Now().Add(-10 * time.Second)
	l.Release(p, time.Now())
	// hold 10s, limit 2, queue 0: 10*1/2 = 5s
	if got := l.RetryAfter(); got != 5*time.Second {
		t.Fatalf("RetryAfter = %v, want 5s", got)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func BenchmarkLimiterAcquireRelease(b *testing.B) {
	// The clock is read once by the proxy per request and passed in; the
	// benchmark measures admission itself.
	now := time.Now()
	b.Run("serial", func(b *testing.B) {
		l := NewLimiter(Options{Ceiling: 100})
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			p, ok := l.TryAcquire(now)
			if !ok {
				b.Fatal("rejected")
			}
			l.Release(p, now)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := NewLimiter(Options{Ceiling: 1 << 20})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, ok := l.TryAcquire(now)
				if !ok {
					b.Fatal("rejected")
				}
				l.Release(p, now)
			}
		})
	})
}
