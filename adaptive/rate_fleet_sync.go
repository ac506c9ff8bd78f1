package adaptive

import (
	"time"

	"github.com/sluicehq/sluice/adaptive/internal/bucket"
)

// The fleet coordinator's side of a fleet-wide quota (rate_fleet.go):
// joining, syncing the pools with the fleet's bucket, falling back to
// local buckets and leaving. None of it is on the request path.

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
		f = &fleetQuota{wake: wake, limits: OwnLimits(*r.set.Load()), replicas: max(replicas, 1)}
		nt := q.clk.Ticks(r.clk.Now())
		f.resizeLocked(q, nt)
		for d := range NumDims {
			q.b[d].SetLevel(nt, 0, nil)
		}
		q.fleet.Store(f)
	}
	r.mu.Unlock()
	f.minWait.Store(bucket.TicksOf(syncEvery))
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
	nt := q.clk.Ticks(r.clk.Now())
	was := f.leased.Load()
	if !was && f.replicas == max(replicas, 1) {
		return
	}
	f.replicas = max(replicas, 1)
	f.resizeLocked(q, nt)
	if was && move {
		for d := range NumDims {
			c, _ := q.b[d].Params()
			if c == 0 {
				continue
			}
			held := min(max(f.pools[d].avail.Load(), 0), c)
			f.pools[d].avail.Add(-held)
			q.b[d].SetLevel(nt, held, nil)
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
	f.eachLimited(func(d Dim, c int64, w time.Duration) {
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
				return
			}
		}
	})
	return out
}

// eachLimited calls fn with every dimension f limits and its bucket's
// capacity and window. The caller holds f.mu.
func (f *fleetQuota) eachLimited(fn func(d Dim, c int64, w time.Duration)) {
	for d := range NumDims {
		if v := f.limits.of(d); v > 0 {
			c, w := f.limits.bucketOf(d, v)
			fn(d, c, w)
		}
	}
}

// FleetReturn prepares the last sync of a replica that leaves the fleet:
// every pool is emptied, its tokens (or its debt) handed back. The quota
// is local at the full limit afterwards (a replica alone), for good: the
// answer to this sync, or any later one, does not lease it again.
func (r *Rates) FleetReturn() []FleetDim {
	q := &r.prov
	f := q.fleet.Load()
	if f == nil {
		return nil
	}
	f.left.Store(true)
	r.fleetLocal(1, false)
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []FleetDim
	f.eachLimited(func(d Dim, c int64, w time.Duration) {
		out = append(out, FleetDim{Dim: d, Capacity: c, Window: w, Give: f.pools[d].avail.Swap(0)})
	})
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
	nt := q.clk.Ticks(now)
	for _, fd := range ds {
		p := &f.pools[fd.Dim]
		p.mark.Store(p.avail.Add(fd.Granted))
		p.level.Store(fd.Level)
		p.syncedAt.Store(nt)
	}
	if f.leased.Load() || f.left.Load() {
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
	return byProvider(r, func(e *entry) *Rates { return e.prov.Rates })
}
