// Package control is the limit maths of a provider: the controller that
// moves its concurrency limit from feedback (time to first token, drops,
// token rate) and the parts it combines (delay, loss, token rate), their
// windows and learned baseline, the set point, the dispatch pace and the
// Retry-After freeze, with their settings.
//
// It knows nothing of permits, queues, tenants, HTTP or configuration
// files: it is fed Samples and answers with a limit, in whatever time its
// Clock gives, so its tests run it in virtual time. Package adaptive owns
// the limiter that hands out permits under that limit and feeds the
// controller.
package control

import "time"

// Clock is the controller's time source: a controller never calls
// time.Now, so it can run in virtual time.
type Clock interface {
	Now() time.Time
}

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
	State() State
}

// State is a snapshot of a controller's parts, so operators can see
// which signal binds the limit.
type State struct {
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
