// Package adaptive owns admission for each provider: who may send a request
// upstream now, who waits, and how many may be in flight. It holds the
// per-provider permit counter, the bounded wait queue (priority classes
// with shares of the limit, fair between tenants by tokens, refusing early
// what would miss its deadline), the static ceiling, and the controllers
// that move the limit under the ceiling from feedback (time to first
// token, drops, token rate).
//
// Around the permit it holds the rest of admission: rate limits with
// reserve-then-settle of requests and tokens (Rates, Reservation), which
// can follow a provider's own quota from its headers; several upstreams
// per provider, each with its own adaptive limit, quota and circuit
// breaker, and the choice among them (UpstreamSet, Attempt, Breaker); and
// the retry policy with its budget (RetryPolicy).
//
// adaptive never imports fasthttp, OpenTelemetry or the config package: the
// proxy translates configuration into the plain structs declared here.
package adaptive

import (
	"time"
)

// Clock is the time source. Controllers and the limiter never call
// time.Now directly, so tests can run them in virtual time.
type Clock interface {
	Now() time.Time
}

// SystemClock reads the monotonic wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// SampleKind says which signal a Sample carries.
type SampleKind uint8

const (
	// FirstToken: a stream produced its first output-bearing delta. TTFT and
	// PromptTokens are set. It is also the success signal for the loss part.
	FirstToken SampleKind = iota + 1
	// Dropped: the provider signalled congestion (429 rate limit, 529, 503,
	// first-token timeout, overloaded error event). RetryAfter may be set.
	Dropped
	// TokenRate: a mid-stream or end-of-stream output token rate measurement
	// (tokens per second over at least 32 tokens). Rate is set.
	TokenRate
	// Answered: a non-streaming request got a whole successful answer. It
	// is a success for the loss part but carries no delay sample: the time
	// to a whole answer measures output length, not queueing. Answers at
	// full use with no stream around move the delay part out of the way
	// (up to the ceiling), so that the loss part alone limits them.
	Answered
)

// DropKind says why a request counted as a drop. It is informational
// (metrics, status); every kind cuts the loss part the same way.
type DropKind uint8

const (
	DropNone DropKind = iota
	DropRateLimit
	DropOverloaded
	DropUnavailable
	DropTimeout
	// NumDropKinds bounds DropKind values, for arrays indexed by kind.
	NumDropKinds
)

// String returns the metric label value of k.
func (k DropKind) String() string {
	switch k {
	case DropRateLimit:
		return "rate_limit"
	case DropOverloaded:
		return "overloaded"
	case DropUnavailable:
		return "unavailable"
	case DropTimeout:
		return "first_token_timeout"
	}
	return "none"
}

// Sample is one piece of feedback about a request that held a permit.
type Sample struct {
	Kind SampleKind
	// Dispatched is when the request's permit was granted (monotonic).
	Dispatched time.Time
	// InflightAtDispatch is the number of permits in use, this one included,
	// right after it was granted.
	InflightAtDispatch int
	// Decoding is how many requests of the controller's limiter (or
	// upstream) had their first token and were still running when the
	// sample was taken: the streams the provider is decoding. Filled in by
	// the limiter, like InflightAtDispatch.
	Decoding int
	// Now is when the signal was observed.
	Now time.Time

	TTFT         time.Duration // FirstToken
	PromptTokens int           // FirstToken: estimated prompt size, for prefill normalisation
	Rate         float64       // TokenRate: output tokens per second
	Drop         DropKind      // Dropped
	RetryAfter   time.Duration // Dropped: provider asked to wait this long (0 = not said)
}

// Controller computes a provider's concurrency limit from feedback.
//
// All implementations must be safe for concurrent use. Observe is called
// from request goroutines (never under the limiter's lock); Limit is read
// after every Observe and must be cheap. A Controller never calls back into
// the Limiter.
type Controller interface {
	// Observe feeds one sample. It returns the new limit (before the ceiling
	// clamp is applied by the limiter).
	Observe(s Sample) int
	// Limit returns the current limit (before the ceiling clamp).
	Limit() int
	// State describes the controller for metrics and the status page.
	State() ControllerState
}

// Pacer is a Controller that may space dispatches in time. PaceWait takes
// the next dispatch slot at now if it comes within at most within, and
// returns how long the dispatch must wait for it (0: send now); when the
// slot is further away it takes nothing and returns false, with the wait
// it would have had. A dispatch that waits keeps its permit, and is sent
// at its slot or not at all. Safe for concurrent use.
type Pacer interface {
	PaceWait(now time.Time, within time.Duration) (time.Duration, bool)
}

// ControllerState is a snapshot of a controller's parts, so operators can see
// which signal binds the limit.
type ControllerState struct {
	Algorithm string
	Limit     int     // min(delay, loss, rate), before ceiling clamp
	Delay     float64 // delay (Gradient2) part; 0 when not used
	Loss      float64 // loss (AIMD) part; 0 when not used
	Rate      float64 // token-rate part; 0 when not used or not binding
	// Pace is the dispatch pace in requests per second, learned from
	// refusals that a request rate, not the concurrency, explains; 0 while
	// dispatches are not paced.
	Pace float64
	// Binding names the part that sets Limit: "delay", "loss", "rate", "min",
	// "fixed".
	Binding        string
	FrozenUntil    time.Time // growth frozen until then by Retry-After (zero = not frozen)
	LastDrop       time.Time
	LastDropKind   DropKind
	TTFTMedian     time.Duration // median of the last closed delay window
	TokenRate      float64       // last token-rate sample, tokens/s
	TTFTBaseline   time.Duration // learned no-load TTFT, or the configured target
	WindowsApplied uint64
	// DelayResets counts how often the delay part's estimate came back
	// non-finite or out of range and was restarted from its last good value.
	DelayResets uint64
	// StaleSamples counts TTFT samples skipped because their request was
	// dispatched before the delay part last changed the limit.
	StaleSamples uint64
	// BadSamples counts samples rejected as invalid (TTFT <= 0 or over an
	// hour, token rate NaN, infinite or negative).
	BadSamples uint64
}
