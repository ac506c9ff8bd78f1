package settings

import (
	"errors"
	"fmt"
	"time"
)

// Limit algorithms (limit.algorithm).
const (
	AlgorithmGradient2 = "gradient2"
	AlgorithmAIMD      = "aimd"
	AlgorithmFixed     = "fixed"
)

// Fleet modes (limit.fleet): how a provider's ceiling is shared by the
// replicas of a Sluice fleet. They matter only when a fleet coordinator
// runs (a cluster block); a lone replica ignores them.
const (
	// FleetShared: every replica admits locally, under its share of the
	// ceiling, which the coordinator derives every heartbeat from the
	// demand the replicas publish and claims atomically against what the
	// others hold. No network on the request path; the fleet can exceed
	// the ceiling by a permit for each replica that gets a request after
	// a quiet spell, until the others make room, and while the
	// coordinator cannot reach Redis.
	FleetShared = "shared"
	// FleetStrict: in addition, every permit holds a lease in the
	// coordination store before the request goes upstream, so the fleet
	// never has more than the ceiling in flight. One round trip per
	// request; it needs a cluster block.
	FleetStrict = "strict"
)

// Limit is a provider's concurrency limit (the limit: block). Algorithm
// picks the controller; the parameters of the others are checked
// whichever is chosen, so switching algorithm never exposes a bad value
// that was accepted earlier. Bad values are rejected, never repaired
// (go-concurrency-limits silently replaces bad parameters, which hides
// configuration mistakes).
type Limit struct {
	// Algorithm is AlgorithmGradient2 (default), AlgorithmAIMD or AlgorithmFixed.
	Algorithm string `yaml:"algorithm"`
	// Ceiling bounds the limit from above (the Limiter clamps too). With
	// AlgorithmFixed it is the limit. Default 50, 1..MaxCeiling.
	Ceiling int `yaml:"ceiling"`
	// Min bounds the adaptive limit from below. Default min(2, Ceiling),
	// 1..Ceiling.
	Min int `yaml:"min"`
	// Initial is the starting limit of every adaptive part. Default
	// min(20, Ceiling) and at least Min, Min..Ceiling.
	Initial int `yaml:"initial"`
	// TTFTTarget, when > 0, turns the delay part into a set-point on the
	// window median of prompt-normalised TTFT. 0 (the default) learns the
	// no-load baseline instead; else 1ms..10m.
	TTFTTarget time.Duration `yaml:"ttft_target"`
	// MinTokenRate is the per-stream output tokens/s below which the
	// provider counts as congested (the token-rate part). Default 0
	// (off), 0..100000.
	MinTokenRate float64 `yaml:"min_token_rate"`
	// Window is the minimum length of a delay sample window. Default 2s,
	// 100ms..1m.
	Window time.Duration `yaml:"window"`
	// WindowSamples is the minimum number of first-token samples in a
	// delay window. Default 5, 1..10000.
	WindowSamples int `yaml:"window_samples"`
	// Smoothing is the set-point mode's smoothing factor (with
	// TTFTTarget); the learned mode does not smooth: its cuts are sized by
	// Little's law. Default 0.5, (0, 1].
	Smoothing float64 `yaml:"smoothing"`
	// LongWindow was Gradient2's long-term average window. The learned
	// baseline no longer uses it (it is the median of recent uncongested
	// windows); it is still accepted, with a deprecation warning, so that
	// configurations that set it stay valid. Default 100, 10..100000.
	LongWindow int `yaml:"long_window"`
	// Backoff is the largest cut the token-rate part makes, and the loss
	// part's cut when the in-flight count at a refusal is unknown (a
	// refusal at n in flight cuts to n-1). Default 0.9, [0.5, 1).
	Backoff float64 `yaml:"backoff"`
	// Cooldown is the shortest time between two loss cuts (and between two
	// token-rate cuts): a burst of drops is one congestion event. Default
	// 2s, 0..10m.
	Cooldown time.Duration `yaml:"cooldown"`
	// PrefillRate is the prompt tokens/s used to remove prefill time from
	// TTFT before it is compared across requests. Default 8000; 0 = no
	// normalisation; else 1..1e7.
	PrefillRate float64 `yaml:"prefill_tokens_per_second"`
	// Fleet is how the replicas of a cluster share the ceiling:
	// FleetShared (the default; "" means it too) or FleetStrict. Without a
	// cluster block only FleetShared is valid, and it changes nothing.
	Fleet string `yaml:"fleet"`
}

// Bounds of the limit settings that are not relative to another setting.
const (
	MaxCeiling           = 100000
	maxTokenRate         = 100000
	maxWindowSamples     = 10000
	minLongWindow        = 10
	maxLongWindow        = 100000
	maxPrefillRate       = 1e7
	defaultMin           = 2  // before it is capped at the ceiling
	defaultInitial       = 20 // before it is capped at the ceiling
	maxTTFTTarget        = 10 * time.Minute
	maxCooldown          = 10 * time.Minute
	minWindow, maxWindow = 100 * time.Millisecond, time.Minute
)

// DefaultLimit returns the limit of a provider that sets none of its keys:
// gradient2, ceiling 50, min 2, initial 20, 2s / 5 sample windows,
// smoothing 0.5, long window 100, backoff 0.9, cooldown 2s, prefill 8000
// tokens/s, no TTFT target, no token-rate floor, the ceiling shared by the
// fleet.
func DefaultLimit() Limit {
	return Limit{
		Algorithm:     AlgorithmGradient2,
		Ceiling:       50,
		Min:           defaultMin,
		Initial:       defaultInitial,
		Window:        2 * time.Second,
		WindowSamples: 5,
		Smoothing:     0.5,
		LongWindow:    100,
		Backoff:       0.9,
		Cooldown:      2 * time.Second,
		PrefillRate:   8000,
		Fleet:         FleetShared,
	}
}

// Complete fills in the defaults that depend on other settings: a Min or
// Initial the user did not set (set reports which keys were) is the
// default capped at the ceiling, and a defaulted Initial is at least Min.
// So `ceiling: 1` alone is valid.
func (l Limit) Complete(set func(key string) bool) Limit {
	if l.Ceiling < 1 {
		return l // reported by Problems
	}
	if !set("min") {
		l.Min = min(defaultMin, l.Ceiling)
	}
	if !set("initial") {
		l.Initial = min(defaultInitial, l.Ceiling)
		if l.Min >= 1 && l.Min <= l.Ceiling {
			l.Initial = max(l.Initial, l.Min)
		}
	}
	return l
}

// Deprecated lists the keys of the limit block that are still accepted
// but no longer do anything, with what to tell a user who sets one.
func (Limit) Deprecated() map[string]string {
	return map[string]string{
		"long_window": "has no effect since the delay part learns its baseline from the median of recent uncongested windows instead of a long-term average; remove it",
	}
}

// Problems lists every invalid setting of l, in declaration order.
func (l Limit) Problems() []Problem {
	var ps problems
	intIn := func(key string, n, lo, hi int) bool {
		if n < lo || n > hi {
			ps.bad(key, "must be between %d and %d, got %d", lo, hi, n)
			return false
		}
		return true
	}
	switch l.Algorithm {
	case AlgorithmGradient2, AlgorithmAIMD, AlgorithmFixed:
	default:
		ps.bad("algorithm", `must be %q, %q or %q, got %q`, AlgorithmGradient2, AlgorithmAIMD, AlgorithmFixed, l.Algorithm)
	}
	if intIn("ceiling", l.Ceiling, 1, MaxCeiling) {
		if l.Min < 1 || l.Min > l.Ceiling {
			ps.bad("min", "must be between 1 and ceiling (%d), got %d", l.Ceiling, l.Min)
		} else if l.Initial < l.Min || l.Initial > l.Ceiling {
			ps.bad("initial", "must be between min (%d) and ceiling (%d), got %d", l.Min, l.Ceiling, l.Initial)
		}
	}
	if t := l.TTFTTarget; t != 0 && (t < time.Millisecond || t > maxTTFTTarget) {
		ps.bad("ttft_target", "must be 0 (learn the baseline) or between 1ms and %s, got %s", FormatDuration(maxTTFTTarget), FormatDuration(t))
	}
	if r := l.MinTokenRate; !(r >= 0 && r <= maxTokenRate) {
		ps.bad("min_token_rate", "must be between 0 and %d, got %v", maxTokenRate, r)
	}
	ps.durIn("window", l.Window, minWindow, maxWindow)
	intIn("window_samples", l.WindowSamples, 1, maxWindowSamples)
	if !(l.Smoothing > 0 && l.Smoothing <= 1) {
		ps.bad("smoothing", "must be greater than 0 and at most 1, got %v", l.Smoothing)
	}
	intIn("long_window", l.LongWindow, minLongWindow, maxLongWindow)
	if !(l.Backoff >= 0.5 && l.Backoff < 1) {
		ps.bad("backoff", "must be at least 0.5 and less than 1, got %v", l.Backoff)
	}
	ps.durIn("cooldown", l.Cooldown, 0, maxCooldown)
	if r := l.PrefillRate; r != 0 && !(r >= 1 && r <= maxPrefillRate) {
		ps.bad("prefill_tokens_per_second", "must be 0 (no normalisation) or between 1 and %d, got %v", int(maxPrefillRate), r)
	}
	if l.Fleet != "" && l.Fleet != FleetShared && l.Fleet != FleetStrict {
		ps.bad("fleet", `must be %q or %q, got %q`, FleetShared, FleetStrict, l.Fleet)
	}
	return ps
}

// Validate reports every problem with l at once, or nil: for code that
// builds a Limit by hand rather than from a checked configuration.
func (l Limit) Validate() error {
	ps := l.Problems()
	if len(ps) == 0 {
		return nil
	}
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = errors.New(p.String())
	}
	return fmt.Errorf("invalid limit settings: %w", errors.Join(errs...))
}

// MaxCooldown is the longest cooldown: the longest a loss cut holds the
// limit, and so, with a capped Retry-After, bounds any freeze a replica of
// a fleet may announce.
const MaxCooldown = maxCooldown
