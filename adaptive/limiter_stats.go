package adaptive

import "time"

// Stats is a point-in-time view of a limiter, for metrics and status.
type Stats struct {
	// Settings are the limiter's settings in force.
	Settings LimiterSettings
	Inflight int
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
	Controller      ControllerState
	Admitted        uint64
	RejectedFull    uint64
	RejectedTimeout uint64
	Canceled        uint64
	WaitedTotal     time.Duration
	// Drops counts the congestion signals fed to the controller, by kind
	// (at most one per request).
	Drops [NumDropKinds]uint64
}

// Values of Stats.Binding besides the controller's own parts.
const (
	BindingCeiling = "ceiling"
	BindingFixed   = "fixed"
)

// Stats returns the current counters and the controller's state. Reads are
// atomic but not one snapshot.
func (l *Limiter) Stats() Stats {
	s := Stats{
		Settings:        *l.set.Load(),
		Inflight:        int(l.inflight.Load()),
		Waiting:         int(l.waiting.Load()),
		Limit:           int(l.limit.Load()),
		Ceiling:         int(l.ceiling.Load()),
		Admitted:        l.admitted.Load(),
		RejectedFull:    l.rejectedFull.Load(),
		RejectedTimeout: l.rejectedTime.Load(),
		Canceled:        l.canceled.Load(),
		WaitedTotal:     time.Duration(l.waitedTotalNs.Load()),
	}
	for k := range s.Drops {
		s.Drops[k] = l.drops[k].Load()
	}
	if b := l.ctrl.Load(); b != nil {
		s.Controller = b.c.State()
	}
	s.Binding = bindingOf(s.Limit, s.Ceiling, s.Controller)
	return s
}

// bindingOf names what sets the effective limit: the controller reports
// which of its parts is lowest; when the ceiling clamps it, the ceiling
// binds.
func bindingOf(limit, ceiling int, cs ControllerState) string {
	switch {
	case cs.Algorithm == AlgorithmFixed || cs.Binding == BindingFixed:
		return BindingFixed
	case cs.Binding == "", limit >= ceiling && cs.Limit >= ceiling:
		return BindingCeiling
	}
	return cs.Binding
}
