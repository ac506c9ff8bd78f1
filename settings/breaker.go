package settings

import "time"

// Breaker is the circuit breaker of each upstream of a provider (the
// breaker: block).
type Breaker struct {
	// ConsecutiveFailures opens the breaker after this many failures in a
	// row. Default 5, 0..10000; 0 turns this trigger off.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// FailureRatio opens the breaker when at least this fraction of the
	// attempts of the last Window failed (and there were at least
	// MinRequests). Default 0.5; 0 turns this trigger off; else up to 1.
	FailureRatio float64 `yaml:"failure_ratio"`
	// MinRequests is how many attempts the window must hold before the
	// ratio counts. Default 20, 1..1000000.
	MinRequests int `yaml:"min_requests"`
	// Window is how far back the failure ratio looks. Default 10s,
	// 1s..10m.
	Window time.Duration `yaml:"window"`
	// OpenTime is how long an open breaker sends nothing before it lets
	// probes through. Default 15s, 100ms..1h.
	OpenTime time.Duration `yaml:"open_time"`
	// QuotaOpenTime is how long the breaker stays open after a billing or
	// quota error (insufficient_quota): waiting seconds does not fix a
	// billing problem. Default 5m, 1s..24h.
	QuotaOpenTime time.Duration `yaml:"quota_open_time"`
	// HalfOpenProbes is how many requests a half-open breaker lets
	// through at once, and how many must succeed to close it. Default 3,
	// 1..1000.
	HalfOpenProbes int `yaml:"half_open_probes"`
}

// DefaultBreaker returns: open after 5 failures in a row or half of at
// least 20 attempts in 10s; closed for 15s (5m after a quota error); 3
// probes.
func DefaultBreaker() Breaker {
	return Breaker{
		ConsecutiveFailures: 5,
		FailureRatio:        0.5,
		MinRequests:         20,
		Window:              10 * time.Second,
		OpenTime:            15 * time.Second,
		QuotaOpenTime:       5 * time.Minute,
		HalfOpenProbes:      3,
	}
}

// Problems lists every invalid breaker setting; Key is the key inside the
// breaker: block.
func (b Breaker) Problems() []Problem {
	var ps problems
	if b.ConsecutiveFailures < 0 || b.ConsecutiveFailures > 10000 {
		ps.bad("consecutive_failures", "must be between 0 (off) and 10000, got %d", b.ConsecutiveFailures)
	}
	if !(b.FailureRatio >= 0 && b.FailureRatio <= 1) {
		ps.bad("failure_ratio", "must be between 0 (off) and 1, got %v", b.FailureRatio)
	}
	if b.MinRequests < 1 || b.MinRequests > 1000000 {
		ps.bad("min_requests", "must be between 1 and 1000000, got %d", b.MinRequests)
	}
	ps.durIn("window", b.Window, time.Second, 10*time.Minute)
	ps.durIn("open_time", b.OpenTime, 100*time.Millisecond, time.Hour)
	ps.durIn("quota_open_time", b.QuotaOpenTime, time.Second, 24*time.Hour)
	if b.HalfOpenProbes < 1 || b.HalfOpenProbes > 1000 {
		ps.bad("half_open_probes", "must be between 1 and 1000, got %d", b.HalfOpenProbes)
	}
	return ps
}
