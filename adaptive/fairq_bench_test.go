package adaptive

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// BenchmarkQueue measures one enqueue plus one dequeue on a queue already
// holding n waiters: Acquire's slow path under the lock (wait estimate,
// fair-queue tags, heap insertion) and a release's hand-off (priority
// scan, heap pop, class and tenant accounting), without the goroutine
// wake-up around them. Waiters are spread over min(n, 1000) tenants and
// the three classes.
func BenchmarkQueue(b *testing.B) {
	for _, n := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			q := queueSettings(n+1, time.Hour)
			q.MaxTenants = 2000
			clk := vtime.NewClock()
			c := &stateController{}
			c.lim.Store(1)
			set := settings.DefaultLimit()
			set.Algorithm, set.Ceiling, set.Min, set.Initial = settings.AlgorithmFixed, 1000, 1, 1
			l := newLimiter(LimiterSettings{Limit: set, Queue: q}, c, clk)
			now := clk.Now()
			tenants := min(n, 1000)
			flow := func(i int) Flow {
				return Flow{Tenant: uint64(i % tenants), Class: uint8(1 + i%3), MaxOutput: 500 + i%1000}
			}
			var holder Permit
			if !l.TryAcquire(now, Flow{}, &holder) {
				b.Fatal("refused")
			}
			var p Permit
			for i := range n {
				if _, wait, err := l.enqueue(now, flow(i), &p); err != nil || wait == 0 {
					b.Fatalf("prefill %d: wait %v, err %v", i, wait, err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := l.enqueue(now, flow(n+i), &p); err != nil {
					b.Fatal(err)
				}
				// Dequeue: what a release's drain does for the waiter it
				// serves, then that request's end (class and tenant back).
				l.mu.Lock()
				w := l.pickLocked(now)
				l.waiting.Add(-1)
				w.cls.waiting.Add(-1)
				l.queued.Store(l.q.nonZero)
				l.mu.Unlock()
				w.cls.inflight.Add(-1)
				w.t.unhold()
				waiterPool.Put(w)
			}
		})
	}
}
