package adaptive

import (
	"math"
	"sort"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/settings"
)

// Stats is a point-in-time view of a limiter, for metrics and status.
type Stats struct {
	// Settings are the limiter's settings in force.
	Settings LimiterSettings
	Inflight int
	// Kept is the number of permits released by a tenant under its share
	// and kept for its next request for a moment (keep.go): counted
	// against the limit, held by no request.
	Kept int
	// Decoding is how many of the permits in use are past their first
	// token (Sample.Decoding); back to 0 when every request has ended.
	Decoding int
	Waiting  int
	// Limit is the effective limit: permits that may be in use now,
	// min(controller limit, ceiling).
	Limit   int
	Ceiling int
	// Binding names what sets Limit: "delay", "loss", "rate" or "min" (the
	// controller's part), "ceiling" (the ceiling clamps the controller), or
	// "fixed" (algorithm fixed).
	Binding string
	// Controller is the controller's state: its parts, baseline, last
	// drop, Retry-After freeze.
	Controller control.State
	// Saturation is how close the provider is to saturation, 0 to 1, as
	// the class shares see it (settings.Queue.SaturationTTFTRatio and
	// SaturationHold).
	Saturation float64
	Admitted   uint64
	// Rejections by reason: queue full, deadline passed while waiting,
	// estimated wait over the deadline at arrival, displaced by a request
	// of a higher priority; Canceled left the queue with their client.
	RejectedFull     uint64
	RejectedTimeout  uint64
	RejectedDeadline uint64
	Displaced        uint64
	Canceled         uint64
	WaitedTotal      time.Duration
	// Drops counts the congestion signals fed to the controller, by kind
	// (at most one per request).
	Drops [control.NumDropKinds]uint64
	// OutputEstimate is the output, in tokens, a request is expected to
	// produce (beyond its prompt estimate), learned from the requests that
	// ended; the fair queue charges it to requests until they end. 0 until
	// one ended.
	OutputEstimate float64
	// Classes are the priority classes in force, in priority order.
	Classes []ClassStats
	// Tenants are the TopTenants tenants with the most tokens used, most
	// first; TenantsTracked counts all tracked tenants.
	Tenants        []TenantStats
	TenantsTracked int
}

// ClassStats is one priority class of a limiter.
type ClassStats struct {
	Name string
	// Share is the fraction of the limit the class may hold now, and Cap
	// that share in permits (at least 1).
	Share    float64
	Cap      int
	Inflight int
	Waiting  int
	Admitted uint64
	// Rejected counts refusals of every reason but cancellation.
	Rejected    uint64
	WaitedTotal time.Duration
	// Calibration is how far the waits estimated for its queued requests
	// were from the waits they had, and whether requests are refused on
	// their estimate now.
	Calibration CalibrationStats
}

// TenantStats is one tenant of a limiter. Tenant is the hash the proxy
// computed (AnonymousTenant, OtherTenant), never the raw key. Tokens is
// the usage of its requests that ended (actual when known, else their
// estimate) since it was last tracked.
type TenantStats struct {
	Tenant   uint64
	Tokens   uint64
	Inflight int
	Waiting  int
	Rejected uint64
}

// TopTenants is how many tenants Stats lists.
const TopTenants = 10

// Values of Stats.Binding besides the controller's own parts.
const (
	BindingCeiling = "ceiling"
	BindingFixed   = "fixed"
	// BindingFleet: this replica's share of the provider's ceiling across
	// the fleet (Limiter.SetFleetCap) is what holds the limit.
	BindingFleet = "fleet"
)

// Stats returns the current counters and the controller's state. Reads are
// atomic but not one snapshot. It visits every tracked tenant to find the
// top ones: call it for metrics and status, not per request.
func (l *Limiter) Stats() Stats {
	s := Stats{
		Settings:         *l.set.Load(),
		Inflight:         int(l.inflight.Load()) - l.Kept(),
		Kept:             l.Kept(),
		Decoding:         int(l.decoding.Load()),
		Waiting:          int(l.waiting.Load()),
		Limit:            int(l.limit.Load()),
		Ceiling:          int(l.ceiling.Load()),
		Saturation:       math.Float64frombits(l.sat.Load()),
		RejectedFull:     l.rejectedFull.Load(),
		RejectedTimeout:  l.rejectedTime.Load(),
		RejectedDeadline: l.rejectedEarly.Load(),
		Displaced:        l.displaced.Load(),
		Canceled:         l.canceled.Load(),
		WaitedTotal:      time.Duration(l.waitedTotalNs.Load()),
	}
	for k := range s.Drops {
		s.Drops[k] = l.drops[k].Load()
	}
	if b := l.ctrl.Load(); b != nil {
		s.Controller = b.c.State()
	}
	s.Binding = bindingOf(s.Limit, s.Ceiling, l.FleetCap(), s.Controller)
	s.Admitted = l.retired.Load()
	s.OutputEstimate = l.output.load()
	now := l.clock.Now()
	qc := l.qc.Load()
	for _, c := range qc.classes {
		s.Admitted += c.admitted.Load()
		l.mu.Lock()
		cal := c.calib.stats(now, c.hold(qc.classes))
		l.mu.Unlock()
		s.Classes = append(s.Classes, ClassStats{
			Name:        c.name,
			Share:       c.shareNow(),
			Cap:         int(classCap(c, int64(s.Limit))),
			Inflight:    int(c.inflight.Load()),
			Waiting:     int(c.waiting.Load()),
			Admitted:    c.admitted.Load(),
			Rejected:    c.rejected.Load(),
			WaitedTotal: time.Duration(c.waitedNs.Load()),
			Calibration: cal,
		})
	}
	s.Tenants, s.TenantsTracked = l.topTenants(TopTenants)
	return s
}

// Limit returns the effective limit: permits that may be in use now. It
// is one atomic load, for the request path (Stats is not).
func (l *Limiter) Limit() int { return int(l.limit.Load()) }

// topTenants returns the n tenants with the most tokens, and how many are
// tracked.
func (l *Limiter) topTenants(n int) ([]TenantStats, int) {
	var all []TenantStats
	l.tenants.each(func(t *tenant) {
		ts := TenantStats{
			Tenant:   t.id,
			Tokens:   t.tokens.Load(),
			Inflight: int(t.held()),
			Waiting:  int(t.waiting()),
			Rejected: t.rejected.Load(),
		}
		if ts.Tokens > 0 || ts.Rejected > 0 || ts.Waiting > 0 || ts.Inflight > 0 {
			all = append(all, ts)
		}
	})
	sort.Slice(all, func(i, j int) bool {
		if all[i].Tokens != all[j].Tokens {
			return all[i].Tokens > all[j].Tokens
		}
		return all[i].Tenant < all[j].Tenant
	})
	return all[:min(n, len(all))], l.tenants.size()
}

// bindingOf names what sets the effective limit: the controller reports
// which of its parts is lowest; when the ceiling clamps it, the ceiling
// binds; when this replica's share of the fleet (fleetCap, 0: none) is
// below both, the fleet binds.
func bindingOf(limit, ceiling, fleetCap int, cs control.State) string {
	ctrl := cs.Limit
	if ctrl <= 0 || cs.Algorithm == settings.AlgorithmFixed || cs.Binding == BindingFixed {
		ctrl = ceiling
	}
	switch {
	case fleetCap > 0 && limit >= fleetCap && fleetCap < min(ceiling, ctrl):
		return BindingFleet
	case cs.Algorithm == settings.AlgorithmFixed || cs.Binding == BindingFixed:
		return BindingFixed
	case cs.Binding == "", limit >= ceiling && cs.Limit >= ceiling:
		return BindingCeiling
	}
	return cs.Binding
}
