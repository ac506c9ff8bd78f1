package adaptive

import (
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

	// tokens is the settled usage (estimates until settled), admitted and
	// rejected count requests; for status.
	tokens   atomic.Uint64
	admitted atomic.Uint64
	rejected atomic.Uint64
	// debt is settled minus estimated tokens not yet folded into a lane's
	// finish tag (negative: a refund). It is folded in at the tenant's
	// next enqueue.
	debt atomic.Int64

	slot  int    // index in tenantTable.slots; under tenantTable.mu
	lanes []lane // one per level; under Limiter.mu, allocated on first wait
}

const (
	heldMask = 1<<32 - 1
	pinUnit  = 1 << 32
)

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
// lock-free (sync.Map); adding a tenant takes mu and, when the table is
// full, replaces an idle tenant chosen by the CLOCK algorithm (one not
// requested since the hand last passed, holding no permit and with no
// waiter). When none is found, the new tenant is served as OtherTenant.
type tenantTable struct {
	m     sync.Map // uint64 -> *tenant
	other *tenant

	mu    sync.Mutex
	slots []*tenant
	max   int
	hand  int
}

func newTenantTable(maxTenants int) *tenantTable {
	return &tenantTable{other: &tenant{id: OtherTenant, slot: -1}, max: maxTenants}
}

// setMax changes the bound; a lower one takes effect as tenants are
// replaced.
func (tt *tenantTable) setMax(n int) {
	tt.mu.Lock()
	tt.max = n
	tt.mu.Unlock()
}

// get returns the tenant id, adding it when new.
func (tt *tenantTable) get(id uint64) *tenant {
	if id == OtherTenant {
		return tt.other
	}
	if v, ok := tt.m.Load(id); ok {
		t := v.(*tenant)
		t.touch()
		return t
	}
	return tt.add(id)
}

func (tt *tenantTable) add(id uint64) *tenant {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if v, ok := tt.m.Load(id); ok {
		return v.(*tenant)
	}
	for len(tt.slots) >= tt.max {
		if !tt.evictOne() {
			return tt.other
		}
	}
	t := &tenant{id: id, slot: len(tt.slots)}
	t.used.Store(true)
	tt.slots = append(tt.slots, t)
	tt.m.Store(id, t)
	return t
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
		tt.m.Delete(t.id)
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
