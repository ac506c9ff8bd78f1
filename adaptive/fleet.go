package adaptive

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
)

// Fleet modes: how a provider's ceiling is shared by the replicas of a
// Sluice fleet (Settings.Fleet). They matter only when a fleet coordinator
// (adaptive/cluster) runs; a lone replica ignores them.
const (
	// FleetShared: every replica admits locally, under its share of the
	// ceiling, which the coordinator derives about once a second from the
	// demand the replicas publish and claims atomically against what the
	// others hold. No network on the request path; the fleet can exceed
	// the ceiling by a permit for each replica that gets a request after
	// a quiet spell, until the others make room, and while the
	// coordinator cannot reach Redis.
	FleetShared = control.FleetShared
	// FleetStrict: in addition, every permit holds a lease in the
	// coordination store before the request goes upstream, so the fleet
	// never has more than the ceiling in flight. One round trip per
	// request.
	FleetStrict = control.FleetStrict
)

// fleetHooks are what a fleet coordinator sets on a limiter from outside:
// a cap on the effective limit (this replica's share of the ceiling) and,
// in strict mode, the lease source every permit must take a lease from.
// The zero value is no cap and no leases: a limiter outside a fleet.
type fleetHooks struct {
	cap    atomic.Int64 // 0: none
	leaser atomic.Pointer[leaserBox]
}

// bound returns c, lowered to the fleet cap when one is set.
func (h *fleetHooks) bound(c int64) int64 {
	if f := h.cap.Load(); f > 0 && f < c {
		return f
	}
	return c
}

// SetFleetCap bounds the effective limit by n, so it becomes min(controller
// limit, ceiling, n); n <= 0 removes the bound. The fleet coordinator calls
// it with this replica's share of the provider's ceiling. Like a lower
// ceiling, a lower cap revokes no permit in use: new requests wait until
// enough are released. A higher cap admits waiters at once.
func (l *Limiter) SetFleetCap(n int) {
	if n < 0 {
		n = 0
	}
	l.fleet.cap.Store(int64(n))
	l.setLimit(l.controllerLimit())
}

// FleetCap returns the bound set by SetFleetCap; 0 when there is none.
func (l *Limiter) FleetCap() int { return int(l.fleet.cap.Load()) }

// FleetDemand is what a fleet coordinator publishes as this replica's
// demand: the permits in use, the requests waiting for one, and own, the
// most permits this limiter could hold if the fleet cap let it (the
// controller's limit clamped to the ceiling; never the fleet cap). A
// replica whose controller holds it below its share of the fleet's
// ceiling so gets no more than it can use, and the rest goes to the
// others. A few atomic loads: cheap enough to sample often.
func (l *Limiter) FleetDemand() (inflight, waiting, own int) {
	return int(l.inflight.Load()), int(l.waiting.Load()), int(min(l.controllerLimit(), l.ceiling.Load()))
}

// GrowthFreezer is implemented by controllers whose growth can be frozen
// from outside: another replica of the fleet saw a Retry-After or cut its
// limit, and this one must not grow either until then. FreezeGrowth must
// behave like a Retry-After seen locally (no growth before until), without
// counting a drop or cutting the limit; an earlier until than one in force
// changes nothing. Safe for concurrent use.
type GrowthFreezer interface {
	FreezeGrowth(until time.Time)
}

// FreezeGrowth stops the limit from growing until until, as a Retry-After
// seen by this replica would. It reports false when the controller cannot
// be frozen (it does not implement GrowthFreezer; the fixed controller
// never grows anyway).
func (l *Limiter) FreezeGrowth(until time.Time) bool {
	b := l.ctrl.Load()
	if b == nil {
		return false
	}
	f, ok := b.c.(GrowthFreezer)
	if !ok {
		return false
	}
	f.FreezeGrowth(until)
	l.setLimit(int64(b.c.Limit()))
	return true
}

// Limiters returns the registry's limiters by provider name, for a fleet
// coordinator that attaches to every provider of the config in force.
// The map is a copy; the limiters are live.
func (r *Registry) Limiters() map[string]*Limiter {
	return byProvider(r, func(e *entry) *Limiter { return e.lim })
}

// byProvider copies one field of each of the registry's entries into a map
// by provider name, under the registry's lock.
func byProvider[T any](r *Registry, get func(*entry) T) map[string]T {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]T, len(r.entries))
	for name, e := range r.entries {
		out[name] = get(e)
	}
	return out
}
