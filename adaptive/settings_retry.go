package adaptive

import (
	"fmt"
	"time"
)

// RetrySettings are a provider's retry policy (the retries: block).
type RetrySettings struct {
	// MaxAttempts is the most upstream attempts one request makes, the
	// first included. Default 2, 1..10; 1 turns retries off.
	MaxAttempts int
	// BudgetRatio caps retries at this fraction of the requests of the
	// last BudgetWindow, so that retries cannot multiply the load on a
	// failing provider. Default 0.2, 0..1.
	BudgetRatio float64
	// MinPerSecond retries per second are allowed whatever the ratio, so
	// that a quiet provider can still retry. Default 3, 0..10000.
	MinPerSecond float64
	// BudgetWindow is how far back "recent requests" go. Default 10s,
	// 1s..10m.
	BudgetWindow time.Duration
	// BackoffBase and BackoffMax bound the exponential backoff with full
	// jitter: before retry n (1, 2, ...) Sluice waits a random time in
	// [0, min(BackoffMax, BackoffBase x 2^(n-1))). Defaults 250ms and 5s;
	// base 1ms..1m, max base..10m.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// MaxRetryAfter is the longest Retry-After (or retry-after-ms) Sluice
	// waits out before retrying; a longer one ends the retries. Default
	// 10s, 0..10m.
	MaxRetryAfter time.Duration
}

// DefaultRetrySettings returns two attempts, a 20% budget with 3 retries
// per second allowed regardless over a 10 s window, backoff 250 ms..5 s,
// and Retry-After honoured up to 10 s.
func DefaultRetrySettings() RetrySettings {
	return RetrySettings{
		MaxAttempts:   2,
		BudgetRatio:   0.2,
		MinPerSecond:  3,
		BudgetWindow:  10 * time.Second,
		BackoffBase:   250 * time.Millisecond,
		BackoffMax:    5 * time.Second,
		MaxRetryAfter: 10 * time.Second,
	}
}

const maxAttempts = 10

// Problems lists every invalid retry setting; Param is the key inside the
// retries: block.
func (s RetrySettings) Problems() []Problem {
	var ps []Problem
	bad := func(param, format string, a ...any) {
		ps = append(ps, Problem{Param: param, Msg: fmt.Sprintf(format, a...)})
	}
	durIn := func(param string, d, lo, hi time.Duration) {
		if d < lo || d > hi {
			bad(param, "must be between %s and %s, got %s", fmtDur(lo), fmtDur(hi), fmtDur(d))
		}
	}
	if s.MaxAttempts < 1 || s.MaxAttempts > maxAttempts {
		bad("max_attempts", "must be between 1 (no retries) and %d, got %d", maxAttempts, s.MaxAttempts)
	}
	if !(s.BudgetRatio >= 0 && s.BudgetRatio <= 1) {
		bad("budget_ratio", "must be between 0 and 1, got %v", s.BudgetRatio)
	}
	if !(s.MinPerSecond >= 0 && s.MinPerSecond <= 10000) {
		bad("min_per_second", "must be between 0 and 10000, got %v", s.MinPerSecond)
	}
	durIn("budget_window", s.BudgetWindow, time.Second, 10*time.Minute)
	durIn("backoff_base", s.BackoffBase, time.Millisecond, time.Minute)
	if s.BackoffMax < s.BackoffBase || s.BackoffMax > 10*time.Minute {
		bad("backoff_max", "must be between backoff_base (%s) and 10m, got %s", fmtDur(s.BackoffBase), fmtDur(s.BackoffMax))
	}
	durIn("max_retry_after", s.MaxRetryAfter, 0, 10*time.Minute)
	return ps
}

// BreakerSettings are the circuit breaker of each upstream of a provider
// (the breaker: block).
type BreakerSettings struct {
	// ConsecutiveFailures opens the breaker after this many failures in a
	// row. Default 5, 0..10000; 0 turns this trigger off.
	ConsecutiveFailures int
	// FailureRatio opens the breaker when at least this fraction of the
	// attempts of the last Window failed (and there were at least
	// MinRequests). Default 0.5; 0 turns this trigger off; else up to 1.
	FailureRatio float64
	// MinRequests is how many attempts the window must hold before the
	// ratio counts. Default 20, 1..1000000.
	MinRequests int
	// Window is how far back the failure ratio looks. Default 10s,
	// 1s..10m.
	Window time.Duration
	// OpenTime is how long an open breaker sends nothing before it lets
	// probes through. Default 15s, 100ms..1h.
	OpenTime time.Duration
	// QuotaOpenTime is how long the breaker stays open after a billing or
	// quota error (insufficient_quota): waiting seconds does not fix a
	// billing problem. Default 5m, 1s..24h.
	QuotaOpenTime time.Duration
	// HalfOpenProbes is how many requests a half-open breaker lets
	// through at once, and how many must succeed to close it. Default 3,
	// 1..1000.
	HalfOpenProbes int
}

// DefaultBreakerSettings returns: open after 5 failures in a row or half
// of at least 20 attempts in 10 s; closed for 15 s (5 min after a quota
// error); 3 probes.
func DefaultBreakerSettings() BreakerSettings {
	return BreakerSettings{
		ConsecutiveFailures: 5,
		FailureRatio:        0.5,
		MinRequests:         20,
		Window:              10 * time.Second,
		OpenTime:            15 * time.Second,
		QuotaOpenTime:       5 * time.Minute,
		HalfOpenProbes:      3,
	}
}

// Problems lists every invalid breaker setting; Param is the key inside
// the breaker: block.
func (s BreakerSettings) Problems() []Problem {
	var ps []Problem
	bad := func(param, format string, a ...any) {
		ps = append(ps, Problem{Param: param, Msg: fmt.Sprintf(format, a...)})
	}
	durIn := func(param string, d, lo, hi time.Duration) {
		if d < lo || d > hi {
			bad(param, "must be between %s and %s, got %s", fmtDur(lo), fmtDur(hi), fmtDur(d))
		}
	}
	if s.ConsecutiveFailures < 0 || s.ConsecutiveFailures > 10000 {
		bad("consecutive_failures", "must be between 0 (off) and 10000, got %d", s.ConsecutiveFailures)
	}
	if !(s.FailureRatio >= 0 && s.FailureRatio <= 1) {
		bad("failure_ratio", "must be between 0 (off) and 1, got %v", s.FailureRatio)
	}
	if s.MinRequests < 1 || s.MinRequests > 1000000 {
		bad("min_requests", "must be between 1 and 1000000, got %d", s.MinRequests)
	}
	durIn("window", s.Window, time.Second, 10*time.Minute)
	durIn("open_time", s.OpenTime, 100*time.Millisecond, time.Hour)
	durIn("quota_open_time", s.QuotaOpenTime, time.Second, 24*time.Hour)
	if s.HalfOpenProbes < 1 || s.HalfOpenProbes > 1000 {
		bad("half_open_probes", "must be between 1 and 1000, got %d", s.HalfOpenProbes)
	}
	return ps
}
