package adaptive

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive/internal/bucket"
)

// A provider's own quota (rate:) shared by a fleet of replicas, so that an
// account's requests and tokens per minute hold fleet-wide.
//
// The fleet's bucket lives in the coordination store (adaptive/cluster: a
// token bucket per dimension, refilled in the store's time and updated by
// one atomic script). The request path never waits for the store: each
// replica leases tokens from the fleet's bucket in batches into a local
// pool per dimension, and a reservation takes from the pool with one CAS,
// as it would from its local bucket. Settling gives back to the pool, or
// charges it (a pool may owe), and the next sync hands the pool's surplus
// and its debt to the fleet's bucket while it leases more. So every token
// is in one place at a time (the fleet's bucket, one replica's pool, or
// one request's claim): the fleet never admits more than its bucket holds,
// and what it charged for a request is exactly what the request used.
//
// The price is tokens parked in pools: a replica keeps about twice what it
// used over the last sync interval (at least a tenth of the bucket split
// among the replicas, floorTenth) and returns the rest at the next sync. A
// request the pool cannot cover is refused with Retry set and a short
// Retry-After: the refusal woke the sync loop, which leases more at once
// when the fleet has it, so a caller that can wait tries again (the proxy
// does, within queue.max_wait).
//
// While the store cannot be reached the quota is local again: each
// dimension's bucket holds limit / replicas (the replicas last seen), like
// the ceiling's degraded mode, never the whole limit on every replica. It
// starts with the tokens the pool held (they were leased already), so the
// switch itself admits nothing the fleet did not grant.
type fleetQuota struct {
	leased  atomic.Bool
	left    atomic.Bool     // FleetReturn: local for good, whatever answers come
	wake    chan<- struct{} // the coordinator's sync loop; sent to without blocking
	minWait atomic.Int64    // ticks: the sync interval, the shortest Retry-After of a pool refusal
	pools   [NumDims]leasePool

	mu       sync.Mutex // mode changes and syncs (never on the request path)
	limits   Limits     // the configured (fleet-wide) limits
	replicas int        // while local: the buckets hold limits / replicas
}

// leasePool is one dimension's leased tokens on this replica.
type leasePool struct {
	avail    atomic.Int64 // leased and not used; negative: owed to the fleet
	short    atomic.Int64 // the largest cost refused since the last sync
	level    atomic.Int64 // the fleet's bucket after the last sync
	syncedAt atomic.Int64 // ticks of the last sync
	// mark is avail right after the last sync: what requests took since
	// (net of refunds) is mark - avail. One word fewer to write per
	// request than a usage counter, on a line every replica's request
	// touches.
	mark atomic.Int64
}

// floorTenth: a pool keeps at least a tenth of the bucket split among the
// replicas, so that an idle replica admits its next request at once.
const floorTenth = 10

func (p *leasePool) take(n int64) bool {
	for {
		a := p.avail.Load()
		if a < n {
			return false
		}
		if p.avail.CompareAndSwap(a, a-n) {
			return true
		}
	}
}

// give puts n back into the pool (negative: takes it, owing if need be).
func (p *leasePool) give(n int64) { p.avail.Add(n) }

func (p *leasePool) noteShort(n int64) {
	for {
		s := p.short.Load()
		if n <= s || p.short.CompareAndSwap(s, n) {
			return
		}
	}
}

// reserveLeased is Quota.reserve while the quota is leased from the fleet.
func (q *Quota) reserveLeased(f *fleetQuota, now time.Time, c *claim, cost costs) (time.Duration, bool, bool) {
	var taken uint8
	for d := range NumDims {
		capacity, _, _, on := q.b[d].Shape()
		if !on {
			continue
		}
		if cost[d] > capacity {
			f.undo(taken, cost)
			return 0, false, true
		}
		if !f.pools[d].take(cost[d]) {
			f.undo(taken, cost)
			f.pools[d].noteShort(cost[d])
			select {
			case f.wake <- struct{}{}:
			default:
			}
			return bucket.DurationOf(f.waitFor(q, q.clk.Ticks(now), cost)), false, false
		}
		taken |= 1 << d
	}
	*c = claim{q: q, cost: cost, taken: taken, state: claimHeld, leased: true}
	return 0, true, false
}

func (f *fleetQuota) undo(taken uint8, cost costs) {
	for d := range NumDims {
		if taken&(1<<d) != 0 {
			f.pools[d].give(cost[d])
		}
	}
}

// waitFor estimates how long until cost fits this replica's pools: the
// fleet's bucket at the last sync, refilled since, plus the pool, and at
// least one sync interval (-1: it never fits).
func (f *fleetQuota) waitFor(q *Quota, nt int64, cost costs) int64 {
	longest := f.minWait.Load()
	for d := range NumDims {
		capacity, interval, _, on := q.b[d].Shape()
		if !on {
			continue
		}
		if cost[d] > capacity {
			return -1
		}
		p := &f.pools[d]
		missing := cost[d] - p.avail.Load() - p.level.Load()
		longest = max(longest, bucket.AddSat(bucket.MulSat(max(missing, 0), interval), -(nt-p.syncedAt.Load())))
	}
	return longest
}

// settleLeased is Quota.settle for a claim taken from the pools: the
// difference between what was reserved and what was used goes back to the
// pools, or is charged to them.
func (q *Quota) settleLeased(c *claim, u Usage) {
	f := q.fleet.Load()
	if f == nil {
		return // unreachable: a quota never leaves its fleet
	}
	used := u.costs()
	for d := range NumDims {
		if c.taken&(1<<d) == 0 {
			continue
		}
		back := c.cost[d]
		if u.Sent {
			back -= used[d]
		}
		f.pools[d].give(back)
	}
}

// levelLeased reports a leased dimension's level: the fleet's bucket at the
// last sync plus this replica's pool.
func (f *fleetQuota) levelLeased(q *Quota, d Dim) (int64, int64, bool) {
	capacity, _, _, on := q.b[d].Shape()
	if !on {
		return 0, 0, false
	}
	p := &f.pools[d]
	return min(p.level.Load()+p.avail.Load(), capacity), capacity, true
}

// configured follows Quota.configure: l is the fleet's limit; while local,
// each bucket holds l / replicas.
func (f *fleetQuota) configured(q *Quota, nt int64, l Limits) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limits = l
	if !f.leased.Load() {
		f.resizeLocked(q, nt)
	}
}

// resizeLocked sizes the local buckets at limits / replicas.
func (f *fleetQuota) resizeLocked(q *Quota, nt int64) {
	n := int64(max(f.replicas, 1))
	for d := range NumDims {
		if v := f.limits.of(d); v > 0 {
			// Rounded down: n local buckets never hold more than the
			// fleet's one, nor refill faster.
			c, w := f.limits.bucketOf(d, v)
			q.b[d].Resize(nt, max(c/n, 1), w)
		}
	}
}
