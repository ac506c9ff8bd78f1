package settings

import "time"

// Retries is a provider's retry policy (the retries: block).
type Retries struct {
	// MaxAttempts is the most upstream attempts one request makes, the
	// first included. Default 2, 1..10; 1 turns retries off.
	MaxAttempts int `yaml:"max_attempts"`
	// BudgetRatio caps retries at this fraction of the requests of the
	// last BudgetWindow, so that retries cannot multiply the load on a
	// failing provider. Default 0.2, 0..1.
	BudgetRatio float64 `yaml:"budget_ratio"`
	// MinPerSecond retries per second are allowed whatever the ratio, so
	// that a quiet provider can still retry. Default 3, 0..10000.
	MinPerSecond float64 `yaml:"min_per_second"`
	// BudgetWindow is how far back "recent requests" go. Default 10s,
	// 1s..10m.
	BudgetWindow time.Duration `yaml:"budget_window"`
	// BackoffBase and BackoffMax bound the exponential backoff with full
	// jitter: before retry n (1, 2, ...) Sluice waits a random time in
	// [0, min(BackoffMax, BackoffBase x 2^(n-1))). Defaults 250ms and 5s;
	// base 1ms..1m, max base..10m.
	BackoffBase time.Duration `yaml:"backoff_base"`
	BackoffMax  time.Duration `yaml:"backoff_max"`
	// MaxRetryAfter is the longest Retry-After (or retry-after-ms) Sluice
	// waits out before retrying; a longer one ends the retries. Default
	// 10s, 0..10m.
	MaxRetryAfter time.Duration `yaml:"max_retry_after"`
}

// DefaultRetries returns two attempts, a 20% budget with 3 retries per
// second allowed regardless over a 10s window, backoff 250ms..5s, and
// Retry-After honoured up to 10s.
func DefaultRetries() Retries {
	return Retries{
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

// Problems lists every invalid retry setting; Key is the key inside the
// retries: block.
func (r Retries) Problems() []Problem {
	var ps problems
	if r.MaxAttempts < 1 || r.MaxAttempts > maxAttempts {
		ps.bad("max_attempts", "must be between 1 (no retries) and %d, got %d", maxAttempts, r.MaxAttempts)
	}
	if !(r.BudgetRatio >= 0 && r.BudgetRatio <= 1) {
		ps.bad("budget_ratio", "must be between 0 and 1, got %v", r.BudgetRatio)
	}
	if !(r.MinPerSecond >= 0 && r.MinPerSecond <= 10000) {
		ps.bad("min_per_second", "must be between 0 and 10000, got %v", r.MinPerSecond)
	}
	ps.durIn("budget_window", r.BudgetWindow, time.Second, 10*time.Minute)
	ps.durIn("backoff_base", r.BackoffBase, time.Millisecond, time.Minute)
	if r.BackoffMax < r.BackoffBase || r.BackoffMax > 10*time.Minute {
		ps.bad("backoff_max", "must be between backoff_base (%s) and 10m, got %s", FormatDuration(r.BackoffBase), FormatDuration(r.BackoffMax))
	}
	ps.durIn("max_retry_after", r.MaxRetryAfter, 0, 10*time.Minute)
	return ps
}
