package control

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Algorithm names accepted in Settings.Algorithm.
const (
	AlgorithmGradient2 = "gradient2"
	AlgorithmAIMD      = "aimd"
	AlgorithmFixed     = "fixed"
)

// Fleet modes, the values of Settings.Fleet: how a provider's ceiling is
// shared by the replicas of a Sluice fleet (adaptive/cluster acts on them;
// the controller does not read them).
const (
	// FleetShared: every replica admits locally, under its share of the
	// ceiling.
	FleetShared = "shared"
	// FleetStrict: in addition, every permit holds a lease in the
	// coordination store before the request goes upstream.
	FleetStrict = "strict"
)

// Settings are a provider's limit parameters. This file is the one place
// their defaults and valid ranges are decided: the config package applies
// and checks them through the rules the proxy hands it (proxy.ConfigRules),
// and NewController checks them again and rejects, never repairs, a bad
// value (go-concurrency-limits silently replaces bad parameters, which
// hides configuration mistakes).
//
// The parameter names used in Problems are the YAML keys of a provider's
// limit block.
type Settings struct {
	// Algorithm is AlgorithmGradient2 (default), AlgorithmAIMD or AlgorithmFixed.
	Algorithm string
	// Ceiling bounds the limit from above (the Limiter clamps too). With
	// AlgorithmFixed it is the limit. Default 50, 1..MaxCeiling.
	Ceiling int
	// Min bounds the adaptive limit from below. Default min(2, Ceiling),
	// 1..Ceiling.
	Min int
	// Initial is the starting limit of every adaptive part. Default
	// min(20, Ceiling), Min..Ceiling.
	Initial int
	// TTFTTarget, when > 0, turns the delay part into a set-point on the
	// window median of prompt-normalised TTFT (see delay.go). 0 (the
	// default) learns the no-load baseline instead; else 1ms..10m.
	TTFTTarget time.Duration
	// MinTokenRate is the per-stream output tokens/s below which the
	// provider counts as congested (the token-rate part, tokenrate.go). Default 0
	// (off), 0..100000.
	MinTokenRate float64
	// Window is the minimum length of a delay sample window. Default 2s,
	// 100ms..1m.
	Window time.Duration
	// WindowSamples is the minimum number of FirstToken samples in a delay
	// window. Default 5, 1..10000.
	WindowSamples int
	// Smoothing is the set-point mode's smoothing factor (with
	// TTFTTarget); the learned mode does not smooth: its cuts are sized by
	// Little's law (delay.go). Default 0.5, (0, 1].
	Smoothing float64
	// LongWindow was Gradient2's long-term average window. The learned
	// baseline no longer uses it (it is the median of recent uncongested
	// windows, baseline.go); it is still accepted, with a deprecation
	// warning, so that configurations that set it stay valid. Default
	// 100, 10..100000.
	LongWindow int
	// Backoff is the largest cut the rate part makes, and the loss part's
	// cut when the in-flight count at a refusal is unknown (a refusal at n
	// in flight cuts to n-1). Default 0.9, [0.5, 1).
	Backoff float64
	// Cooldown is the shortest time between two loss cuts (and between two
	// rate cuts): a burst of drops is one congestion event. Default 2s,
	// 0..10m.
	Cooldown time.Duration
	// PrefillRate is the prompt tokens/s used to remove prefill time from
	// TTFT before it is compared across requests. Default 8000; 0 = no
	// normalisation; else 1..1e7.
	PrefillRate float64
	// Fleet is how replicas share the ceiling when a fleet coordinator
	// runs: FleetShared (the default; "" means it too) or FleetStrict
	// (fleet.go).
	Fleet string
}

// Bounds of the settings that are not relative to another setting.
const (
	MaxCeiling              = 100000
	maxTokenRate            = 100000
	maxWindowSamplesSetting = 10000
	minLongWindow           = 10
	maxLongWindow           = 100000
	maxPrefillRate          = 1e7
)

// MaxRetryAfter is the longest a provider's Retry-After (or retry-after-ms)
// freezes limit growth. A longer wait is cut to it where the sample is
// applied (the controller), so an upstream that answers "Retry-After:
// 999999999" freezes growth for five minutes, not thirty years. Five
// minutes covers the per-minute windows providers rate-limit by, with
// margin; a provider that still refuses after it sends another 429, which
// cuts the limit and freezes again. The freeze only stops growth, so a
// shorter cap costs at most one more drop per cap interval, and no
// operator needs to choose it.
const MaxRetryAfter = 5 * time.Minute

// capRetryAfter bounds a Retry-After to [0, MaxRetryAfter].
func capRetryAfter(d time.Duration) time.Duration {
	return min(max(d, 0), MaxRetryAfter)
}

// Defaults of Min and Initial before they are capped at the ceiling.
const (
	defaultMin     = 2
	defaultInitial = 20
)

// DefaultSettings returns the defaults of a provider's limit: gradient2,
// ceiling 50, min 2, initial 20, 2 s / 5 sample windows, smoothing 0.5,
// long window 100, backoff 0.9, cooldown 2 s, prefill 8000 tokens/s, no
// TTFT target, no token-rate floor, the ceiling shared by the fleet
// (FleetShared).
func DefaultSettings() Settings {
	return Settings{
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
// Initial the user did not set (set reports which parameters were) is the
// default capped at the ceiling, and a defaulted Initial is at least Min.
// So `ceiling: 1` alone is valid.
func (s Settings) Complete(set func(param string) bool) Settings {
	if s.Ceiling < 1 {
		return s // reported by Problems
	}
	if !set("min") {
		s.Min = min(defaultMin, s.Ceiling)
	}
	if !set("initial") {
		s.Initial = min(defaultInitial, s.Ceiling)
		if s.Min >= 1 && s.Min <= s.Ceiling {
			s.Initial = max(s.Initial, s.Min)
		}
	}
	return s
}

// DeprecatedParams lists the limit parameters that are still accepted but
// no longer do anything, with what to tell a user who sets one.
func DeprecatedParams() map[string]string {
	return map[string]string{
		"long_window": "has no effect since the delay part learns its baseline from the median of recent uncongested windows instead of a long-term average; remove it",
	}
}

// Problem is one invalid setting. Param is the YAML key of the limit block
// ("backoff"); Msg says what is wrong ("must be at least 0.5 and less than
// 1, got 1").
type Problem struct {
	Param string
	Msg   string
}

func (p Problem) String() string { return p.Param + ": " + p.Msg }

// Problems lists every invalid setting of s, in declaration order. The
// Gradient2 and AIMD parameters are checked whichever algorithm is chosen,
// so switching algorithm never exposes a bad value that was accepted
// earlier.
func (s Settings) Problems() []Problem {
	var ps []Problem
	bad := func(param, format string, a ...any) {
		ps = append(ps, Problem{Param: param, Msg: fmt.Sprintf(format, a...)})
	}
	intIn := func(param string, n, lo, hi int) bool {
		if n < lo || n > hi {
			bad(param, "must be between %d and %d, got %d", lo, hi, n)
			return false
		}
		return true
	}
	durIn := func(param string, d, lo, hi time.Duration) {
		if d < lo || d > hi {
			bad(param, "must be between %s and %s, got %s", fmtDur(lo), fmtDur(hi), fmtDur(d))
		}
	}
	switch s.Algorithm {
	case AlgorithmGradient2, AlgorithmAIMD, AlgorithmFixed:
	default:
		bad("algorithm", `must be %q, %q or %q, got %q`, AlgorithmGradient2, AlgorithmAIMD, AlgorithmFixed, s.Algorithm)
	}
	if intIn("ceiling", s.Ceiling, 1, MaxCeiling) {
		if s.Min < 1 || s.Min > s.Ceiling {
			bad("min", "must be between 1 and ceiling (%d), got %d", s.Ceiling, s.Min)
		} else if s.Initial < s.Min || s.Initial > s.Ceiling {
			bad("initial", "must be between min (%d) and ceiling (%d), got %d", s.Min, s.Ceiling, s.Initial)
		}
	}
	if t := s.TTFTTarget; t != 0 && (t < time.Millisecond || t > 10*time.Minute) {
		bad("ttft_target", "must be 0 (learn the baseline) or between 1ms and 10m, got %s", fmtDur(t))
	}
	if r := s.MinTokenRate; !(r >= 0 && r <= maxTokenRate) {
		bad("min_token_rate", "must be between 0 and %d, got %v", maxTokenRate, r)
	}
	durIn("window", s.Window, 100*time.Millisecond, time.Minute)
	intIn("window_samples", s.WindowSamples, 1, maxWindowSamplesSetting)
	if !(s.Smoothing > 0 && s.Smoothing <= 1) {
		bad("smoothing", "must be greater than 0 and at most 1, got %v", s.Smoothing)
	}
	intIn("long_window", s.LongWindow, minLongWindow, maxLongWindow)
	if !(s.Backoff >= 0.5 && s.Backoff < 1) {
		bad("backoff", "must be at least 0.5 and less than 1, got %v", s.Backoff)
	}
	durIn("cooldown", s.Cooldown, 0, 10*time.Minute)
	if r := s.PrefillRate; r != 0 && !(r >= 1 && r <= maxPrefillRate) {
		bad("prefill_tokens_per_second", "must be 0 (no normalisation) or between 1 and 10000000, got %v", r)
	}
	if s.Fleet != "" && s.Fleet != FleetShared && s.Fleet != FleetStrict {
		bad("fleet", `must be %q or %q, got %q`, FleetShared, FleetStrict, s.Fleet)
	}
	return ps
}

// Validate reports every problem with s at once, or nil.
func (s Settings) Validate() error {
	ps := s.Problems()
	if len(ps) == 0 {
		return nil
	}
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = errors.New(p.String())
	}
	return fmt.Errorf("adaptive: invalid limit settings: %w", errors.Join(errs...))
}

// fmtDur prints a duration without trailing zero units: 5m, 1h, 1m30s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
