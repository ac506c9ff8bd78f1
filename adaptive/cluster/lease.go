package cluster

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive"
)

// Bounds of a strict-mode lease request.
const (
	leaseCallTimeout = 500 * time.Millisecond // one acquire round trip
	leasePollMin     = 2 * time.Millisecond   // first wait when the fleet is full
	leasePollMax     = 50 * time.Millisecond  // longest wait between two tries
)

// leaser is one strict-mode provider's adaptive.Leaser: a lease is a
// member of the provider's sorted set, scored by its expiry in Redis time.
type leaser struct {
	c      *Coordinator
	key    string
	prefix string // "replica/nonce/": ids of a restarted replica never collide
	next   atomic.Uint64
	ceil   atomic.Int64 // the fleet's ceiling: the most leases at once

	mu   sync.Mutex
	held map[uint64]struct{}

	granted, waited, timeouts, canceled, unconfirmed, dropped atomic.Uint64
	acquireNs                                                 atomic.Int64 // total time spent in Acquire by granted requests
}

type release struct {
	l  *leaser
	id uint64
}

func newLeaser(c *Coordinator, provider string, ceiling int) *leaser {
	l := &leaser{c: c, key: c.k.leases(provider), prefix: c.o.ReplicaID + "/" + c.nonce + "/", held: make(map[uint64]struct{})}
	l.ceil.Store(int64(ceiling))
	return l
}

func (l *leaser) member(id uint64) string { return l.prefix + strconv.FormatUint(id, 36) }

// Acquire implements adaptive.Leaser. While the replica is degraded it
// grants at once without Redis (the degraded cap bounds the replica); the
// lease is published by the first heartbeat that gets through. An error
// from Redis degrades the replica and grants likewise.
func (l *leaser) Acquire(deadline time.Time, cancel <-chan struct{}) (uint64, error) {
	start := time.Now()
	id := l.next.Add(1)
	if id > adaptive.MaxLeaseID { // unreachable in practice
		id = l.next.Add(1) % adaptive.MaxLeaseID
	}
	wait := leasePollMin
	for tries := 0; ; tries++ {
		if l.c.degraded.Load() {
			l.unconfirmed.Add(1)
			return l.hold(id, start), nil
		}
		ctx, done := context.WithTimeout(context.Background(), leaseCallTimeout)
		r, err := acquireScript.Run(ctx, l.c.rdb, []string{l.key, l.c.k.boot(), l.c.k.rebuild()},
			l.ceil.Load(), l.c.o.Settings.LeaseTTL.Milliseconds(), l.member(id), l.c.rebuildWindow().Milliseconds()).Int64()
		done()
		if err != nil {
			// The lease may have been written before the error: give it
			// back so it does not linger until it expires.
			l.queueRelease(id)
			l.c.degrade(err)
			id = l.next.Add(1)
			continue
		}
		if r == 1 {
			return l.hold(id, start), nil
		}
		if tries == 0 {
			l.waited.Add(1)
		}
		left := time.Until(deadline)
		if left <= 0 {
			l.timeouts.Add(1)
			return 0, adaptive.ErrQueueTimeout
		}
		t := time.NewTimer(min(left, wait/2+rand.N(wait)))
		select {
		case <-t.C:
		case <-cancel:
			t.Stop()
			l.canceled.Add(1)
			return 0, adaptive.ErrCanceled
		}
		wait = min(2*wait, leasePollMax)
	}
}

func (l *leaser) hold(id uint64, start time.Time) uint64 {
	l.mu.Lock()
	l.held[id] = struct{}{}
	l.mu.Unlock()
	l.granted.Add(1)
	l.acquireNs.Add(int64(time.Since(start)))
	return id
}

// Release implements adaptive.Leaser: the lease stops being renewed now
// and is removed from Redis by the heartbeat goroutine shortly after. If
// that queue is full the lease simply expires.
func (l *leaser) Release(id uint64) {
	l.mu.Lock()
	delete(l.held, id)
	l.mu.Unlock()
	l.queueRelease(id)
}

func (l *leaser) queueRelease(id uint64) {
	select {
	case l.c.releaseCh <- release{l, id}:
	default:
		l.dropped.Add(1)
	}
}

// members lists the leases held, for the heartbeat to renew.
func (l *leaser) members() []any {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]any, 0, len(l.held))
	for id := range l.held {
		out = append(out, l.member(id))
	}
	return out
}

func (l *leaser) heldCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held)
}

// sendReleases removes first and every release queued behind it from
// Redis, one script per provider.
func (c *Coordinator) sendReleases(ctx context.Context, first release) {
	by := map[*leaser][]any{first.l: {first.l.member(first.id)}}
	for more := true; more; {
		select {
		case r := <-c.releaseCh:
			by[r.l] = append(by[r.l], r.l.member(r.id))
		default:
			more = false
		}
	}
	if c.degraded.Load() {
		return // unreachable: they expire by themselves
	}
	cctx, cancel := context.WithTimeout(ctx, c.opTimeout())
	defer cancel()
	for l, ms := range by {
		if err := releaseScript.Run(cctx, c.rdb, []string{l.key}, ms...).Err(); err != nil {
			l.dropped.Add(uint64(len(ms)))
		}
	}
}

// drainReleases sends what is still queued, at shutdown.
func (c *Coordinator) drainReleases(ctx context.Context) {
	for {
		select {
		case r := <-c.releaseCh:
			c.sendReleases(ctx, r)
		default:
			return
		}
	}
}
