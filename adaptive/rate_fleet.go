package adaptive

import (
	"sync"
	"sync/atomic"
	"time"
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
		g := q.b[d].cur.Load()
		if g == nil {
			continue
		}
		if cost[d] > g.capacity {
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
			return durationOf(f.waitFor(q, q.clk.ticks(now), cost)), false, false
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
		g := q.b[d].cur.Load()
		if g == nil {
			continue
		}
		if cost[d] > g.capacity {
			return -1
		}
		p := &f.pools[d]
		missing := cost[d] - p.avail.Load() - p.level.Load()
		longest = max(longest, addSat(mulSat(max(missing, 0), g.interval), -(nt-p.syncedAt.Load())))
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
	g := q.b[d].cur.Load()
	if g == nil {
		return 0, 0, false
	}
	p := &f.pools[d]
	return min(p.level.Load()+p.avail.Load(), g.capacity), g.capacity, true
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
			q.b[d].resize(nt, max(c/n, 1), w)
		}
	}
}

// FleetDim is one dimension's part of a sync between this replica's pool
// and the fleet's bucket (FleetPlan, FleetApply).
type FleetDim struct {
	Dim Dim
	// Capacity and Window are the fleet's bucket: Capacity tokens,
	// refilled at Capacity per Window.
	Capacity int64
	Window   time.Duration
	// Give is handed back to the fleet's bucket (capped at its capacity
	// there); negative, it is owed and charged even into debt.
	Give int64
	// Want is asked for; the fleet grants up to what its bucket holds.
	Want int64
	// Held is what the pool holds after Give: the fleet's bucket refills
	// only up to its capacity less what every pool holds, so tokens
	// parked in pools never add to a full bucket.
	Held int64
	// Granted and Level are the answer: the tokens granted and the
	// fleet's bucket after the sync (negative: debt).
	Granted, Level int64
}

// JoinFleet makes the provider's own quota fleet-wide. Until the first
// FleetApply it is local at limits / replicas (the fleet's size expected
// or last seen), its buckets empty: a replica that joins a fleet, even
// while the store is down, adds no burst to what the fleet admits, only
// its refill of limits / replicas. wake receives a value (without blocking) whenever a pool
// refused a request: the coordinator should sync soon. syncEvery is how
// often it syncs. Calling it again updates replicas and syncEvery.
func (r *Rates) JoinFleet(wake chan<- struct{}, replicas int, syncEvery time.Duration) {
	q := &r.prov
	r.mu.Lock()
	f := q.fleet.Load()
	if f == nil {
		f = &fleetQuota{wake: wake, limits: r.set.Load().Limits, replicas: max(replicas, 1)}
		nt := q.clk.ticks(r.clk.Now())
		f.resizeLocked(q, nt)
		for d := range NumDims {
			q.b[d].setLevel(nt, 0, nil)
		}
		q.fleet.Store(f)
	}
	r.mu.Unlock()
	f.minWait.Store(ticksOf(syncEvery))
}

// InFleet reports whether the provider's own quota is fleet-wide, and
// whether it is leased from the fleet now (false: local, degraded).
func (r *Rates) InFleet() (joined, leased bool) {
	f := r.prov.fleet.Load()
	return f != nil, f != nil && f.leased.Load()
}

// FleetLocal makes the quota local at limits / replicas: the coordinator
// cannot reach the store (or has not yet). On the switch from leased,
// each bucket starts with what its pool held (at most its new capacity),
// taken out of the pool.
func (r *Rates) FleetLocal(replicas int) { r.fleetLocal(replicas, true) }

// fleetLocal is FleetLocal; move says whether the pools' tokens move into
// the local buckets (not when they are about to be handed back).
func (r *Rates) fleetLocal(replicas int, move bool) {
	q := &r.prov
	f := q.fleet.Load()
	if f == nil {
		return
	}
	r.mu.Lock() // against Reconfigure
	defer r.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	nt := q.clk.ticks(r.clk.Now())
	was := f.leased.Load()
	if !was && f.replicas == max(replicas, 1) {
		return
	}
	f.replicas = max(replicas, 1)
	f.resizeLocked(q, nt)
	if was && move {
		for d := range NumDims {
			c, _ := q.b[d].params()
			if c == 0 {
				continue
			}
			held := min(max(f.pools[d].avail.Load(), 0), c)
			f.pools[d].avail.Add(-held)
			q.b[d].setLevel(nt, held, nil)
		}
	}
	f.leased.Store(false)
}

// FleetPlan prepares a sync of the pools with the fleet's bucket, replicas
// being the live replicas: every pool's debt, and its surplus above twice
// its target, are taken out of it to be handed back; every pool below its
// target asks for the difference. The target is twice what the pool's
// requests took since the last plan or the largest request it refused,
// at least a tenth of the bucket split among the replicas, at most the
// bucket. The caller sends the plan and applies the answer with
// FleetApply; a plan whose answer was lost must be sent again as it is
// (the store applies each plan once), since its Give is out of the pools.
func (r *Rates) FleetPlan(replicas int) []FleetDim {
	q := &r.prov
	f := q.fleet.Load()
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []FleetDim
	for d := range NumDims {
		v := f.limits.of(d)
		if v <= 0 {
			continue
		}
		c, w := f.limits.bucketOf(d, v)
		p := &f.pools[d]
		short := p.short.Swap(0)
		var a, give int64
		for {
			// One CAS: a surplus taken from a stale level would let
			// requests that took from the pool meanwhile put it in debt,
			// and admit beyond the fleet's bucket until the next sync.
			a = p.avail.Load()
			took := max(p.mark.Load()-a, 0)
			target := min(max(2*took, 2*short, c/int64(floorTenth*max(replicas, 1)), 1), c)
			switch {
			case a < 0:
				give = a
			case a > 2*target:
				give = a - target
			default:
				give = 0
			}
			if give == 0 || p.avail.CompareAndSwap(a, a-give) {
				out = append(out, FleetDim{Dim: d, Capacity: c, Window: w, Give: give, Want: max(target-(a-give), 0), Held: max(a-give, 0)})
				break
			}
		}
	}
	return out
}

// FleetReturn prepares the last sync of a replica that leaves the fleet:
// every pool is emptied, its tokens (or its debt) handed back. The quota
// is local at the full limit afterwards (a replica alone).
func (r *Rates) FleetReturn() []FleetDim {
	q := &r.prov
	f := q.fleet.Load()
	if f == nil {
		return nil
	}
	r.fleetLocal(1, false)
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []FleetDim
	for d := range NumDims {
		v := f.limits.of(d)
		if v <= 0 {
			continue
		}
		c, w := f.limits.bucketOf(d, v)
		a := f.pools[d].avail.Swap(0)
		out = append(out, FleetDim{Dim: d, Capacity: c, Window: w, Give: a})
	}
	return out
}

// FleetApply takes in the answer to a plan at now: the granted tokens
// join the pools, and the quota is leased from the fleet (its local
// buckets back at the full limit, for the checks that need a capacity).
func (r *Rates) FleetApply(now time.Time, ds []FleetDim) {
	q := &r.prov
	f := q.fleet.Load()
	if f == nil {
		return
	}
	nt := q.clk.ticks(now)
	for _, fd := range ds {
		p := &f.pools[fd.Dim]
		p.mark.Store(p.avail.Add(fd.Granted))
		p.level.Store(fd.Level)
		p.syncedAt.Store(nt)
	}
	if f.leased.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.replicas = 1
	f.resizeLocked(q, nt)
	f.leased.Store(true)
}

// FleetPoolStats is one dimension of a fleet-wide quota on this replica.
type FleetPoolStats struct {
	// Held is the tokens leased and not used (negative: owed).
	Held int64
	// FleetLevel is the fleet's bucket at the last sync.
	FleetLevel int64
}

// FleetStats returns each dimension's pool (zero for a dimension not
// limited, or a quota not in a fleet).
func (r *Rates) FleetStats() [NumDims]FleetPoolStats {
	var out [NumDims]FleetPoolStats
	if f := r.prov.fleet.Load(); f != nil {
		for d := range NumDims {
			out[d] = FleetPoolStats{Held: f.pools[d].avail.Load(), FleetLevel: f.pools[d].level.Load()}
		}
	}
	return out
}

// Rates returns the rate layers of the registry's providers by name, for
// a fleet coordinator that shares their own quotas. The map is a copy;
// the rate layers are live.
func (r *Registry) Rates() map[string]*Rates {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]*Rates, len(r.entries))
	for name, e := range r.entries {
		out[name] = e.prov.Rates
	}
	return out
}
