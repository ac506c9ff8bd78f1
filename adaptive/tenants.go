package adaptive

import (
	"math/bits"
	"sync"
	"sync/atomic"
)

// tenant is one tenant's state in one limiter. The permits it holds, its
// waiters and its usage are atomics, so that the fast path needs no lock;
// its lanes (one FIFO per queue level) belong to Limiter.mu.
type tenant struct {
	id uint64
	// word packs the permits held (low 32 bits) and the waiters plus
	// acquisitions in progress (the bits above); -1 once the tenant was
	// evicted from the table, after which nobody may take it.
	word atomic.Int64
	used atomic.Bool // CLOCK reference bit: requested since the hand last passed

	// tokens is the usage of the requests that ended (settled, or their
	// estimate), rejected counts refusals; for status.
	tokens   atomic.Uint64
	rejected atomic.Uint64
	// debt is settled minus estimated tokens not yet folded into a lane's
	// finish tag (negative: a refund). It is folded in at the tenant's
	// next enqueue.
	debt atomic.Int64
	// maxHeld is the tenant's own cap on permits held (its client
	// policy's max_inflight, Flow.MaxInflight), set by its latest
	// request; 0: the queue's tenant_max_inflight.
	maxHeld atomic.Int64

	slot  int    // index in tenantTable.slots; under tenantTable.mu
	lanes []lane // one per level; under Limiter.mu, allocated on first wait
}

const (
	heldMask = 1<<32 - 1
	pinUnit  = 1 << 32
)

// capOf returns the cap on permits t may hold: its own, else the
// queue's queueCap (0: none).
func (t *tenant) capOf(queueCap int64) int64 {
	if c := t.maxHeld.Load(); c > 0 {
		return c
	}
	return queueCap
}

// setCap records the cap of the flow t's request came with. The shared
// other tenant keeps the queue's: it mixes clients.
func (t *tenant) setCap(n int) {
	if c := int64(n); t.id != OtherTenant && t.maxHeld.Load() != c {
		t.maxHeld.Store(c)
	}
}

// held returns the permits t holds.
func (t *tenant) held() int64 { return max(t.word.Load(), 0) & heldMask }

// waiting returns t's waiters (plus acquisitions in progress).
func (t *tenant) waiting() int64 { return max(t.word.Load(), 0) >> 32 }

// hold takes one permit slot of t, unless t holds capN already (capN > 0)
// or was evicted. fromPin turns a pin (a waiter) into the permit.
func (t *tenant) hold(capN int64, fromPin bool) (ok, dead bool) {
	add := int64(1)
	if fromPin {
		add -= pinUnit
	}
	for {
		w := t.word.Load()
		if w < 0 {
			return false, true
		}
		if capN > 0 && w&heldMask >= capN {
			return false, false
		}
		if t.word.CompareAndSwap(w, w+add) {
			return true, false
		}
	}
}

// pin marks an acquisition in progress (then a waiter), so that the
// tenant is not evicted; false when it was evicted already.
func (t *tenant) pin() bool {
	for {
		w := t.word.Load()
		if w < 0 {
			return false
		}
		if t.word.CompareAndSwap(w, w+pinUnit) {
			return true
		}
	}
}

func (t *tenant) unpin()  { t.word.Add(-pinUnit) }
func (t *tenant) unhold() { t.word.Add(-1) }
func (t *tenant) touch() {
	if !t.used.Load() {
		t.used.Store(true)
	}
}

// maxEvictProbes bounds the slots one new tenant inspects for an idle one
// to replace, so that a table full of busy tenants costs a bounded scan.
const maxEvictProbes = 256

// tenantTable tracks at most max tenants of one limiter. Lookups are
// lock-free (an open-addressing index of atomic pointers: one hash and
// usually one load); adding a tenant takes mu and, when the table is full,
// replaces an idle tenant chosen by the CLOCK algorithm (one not requested
// since the hand last passed, holding no permit and with no waiter). When
// none is found, the new tenant is served as OtherTenant.
type tenantTable struct {
	ix    atomic.Pointer[tenantIndex]
	other *tenant

	mu    sync.Mutex
	slots []*tenant
	max   int
	hand  int
	dead  int // tombstones in ix
}

func newTenantTable(maxTenants int) *tenantTable {
	tt := &tenantTable{other: &tenant{id: OtherTenant, slot: -1}}
	tt.setMax(maxTenants)
	return tt
}

// setMax changes the bound; a lower one takes effect as tenants are
// replaced.
func (tt *tenantTable) setMax(n int) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.max = n
	if ix := tt.ix.Load(); ix == nil || len(ix.slots) < indexSize(n) {
		tt.rebuild(n)
	}
}

// get returns the tenant id, adding it when new.
func (tt *tenantTable) get(id uint64) *tenant {
	if id == OtherTenant {
		return tt.other
	}
	if t := tt.ix.Load().find(id); t != nil {
		t.touch()
		return t
	}
	return tt.add(id)
}

func (tt *tenantTable) add(id uint64) *tenant {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if t := tt.ix.Load().find(id); t != nil {
		return t
	}
	for len(tt.slots) >= tt.max {
		if !tt.evictOne() {
			return tt.other
		}
	}
	if 4*(len(tt.slots)+tt.dead+1) > 3*len(tt.ix.Load().slots) {
		tt.rebuild(max(tt.max, len(tt.slots)+1))
	}
	t := &tenant{id: id, slot: len(tt.slots)}
	t.used.Store(true)
	tt.slots = append(tt.slots, t)
	tt.ix.Load().insert(t)
	return t
}

// rebuild replaces the index with one sized for n tenants, holding the
// tracked ones and no tombstone. Under mu; readers of the old index keep
// a valid (if stale) view, and a tenant evicted since is dead, so they
// look again.
func (tt *tenantTable) rebuild(n int) {
	size := indexSize(max(n, len(tt.slots)))
	ix := &tenantIndex{slots: make([]atomic.Pointer[tenant], size), mask: uint64(size - 1)}
	for _, t := range tt.slots {
		ix.insert(t)
	}
	tt.ix.Store(ix)
	tt.dead = 0
}

// tenantIndex maps tenant ids to tenants: open addressing with linear
// probing, at most 3/4 full (tombstones included), so a probe always ends
// at an empty slot.
type tenantIndex struct {
	slots []atomic.Pointer[tenant]
	mask  uint64
}

// tombstone marks a slot whose tenant was removed: probes go past it.
var tombstone = &tenant{slot: -1}

func indexSize(n int) int { return max(16, 1<<bits.Len(uint(2*n))) }

// home is id's first slot (ids are hashes already; the multiply spreads
// small test ids).
func (ix *tenantIndex) home(id uint64) uint64 { return (id * 0x9e3779b97f4a7c15) >> 32 & ix.mask }

func (ix *tenantIndex) find(id uint64) *tenant {
	for i := ix.home(id); ; i = (i + 1) & ix.mask {
		t := ix.slots[i].Load()
		if t == nil {
			return nil
		}
		if t.id == id && t != tombstone {
			return t
		}
	}
}

// insert adds t in the first empty or tombstone slot of its probe. Under
// tenantTable.mu.
func (ix *tenantIndex) insert(t *tenant) {
	for i := ix.home(t.id); ; i = (i + 1) & ix.mask {
		if cur := ix.slots[i].Load(); cur == nil || cur == tombstone {
			ix.slots[i].Store(t)
			return
		}
	}
}

// remove replaces t by a tombstone. Under tenantTable.mu.
func (ix *tenantIndex) remove(t *tenant) {
	for i := ix.home(t.id); ; i = (i + 1) & ix.mask {
		cur := ix.slots[i].Load()
		if cur == nil {
			return
		}
		if cur == t {
			ix.slots[i].Store(tombstone)
			return
		}
	}
}

// evictOne forgets one idle tenant; false when none was found within
// maxEvictProbes slots.
func (tt *tenantTable) evictOne() bool {
	n := len(tt.slots)
	for range min(2*n, maxEvictProbes) {
		if tt.hand >= n {
			tt.hand = 0
		}
		t := tt.slots[tt.hand]
		if t.used.Swap(false) || !t.word.CompareAndSwap(0, -1) {
			tt.hand++
			continue
		}
		tt.ix.Load().remove(t)
		tt.dead++
		last := tt.slots[n-1]
		tt.slots[t.slot], last.slot = last, t.slot
		tt.slots[n-1] = nil
		tt.slots = tt.slots[:n-1]
		return true
	}
	return false
}

// each calls fn for every tracked tenant and the other tenant, under mu.
func (tt *tenantTable) each(fn func(*tenant)) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for _, t := range tt.slots {
		fn(t)
	}
	fn(tt.other)
}

// size returns the number of tenants tracked.
func (tt *tenantTable) size() int {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return len(tt.slots)
}
