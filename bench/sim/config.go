package sim

import (
	"fmt"
	"time"
)

// Defaults applied by [New] to zero fields of [Config]. They are the
// reference provider the scenario suite and the demo run against.
const (
	DefaultCapacity         = 40
	DefaultOverloadFactor   = 1.5
	DefaultRetryAfter       = time.Second
	DefaultBaseTTFT         = 250 * time.Millisecond
	DefaultPrefillRate      = 8000.0
	DefaultJitterSigma      = 0.3
	DefaultITL              = 20 * time.Millisecond
	DefaultITLLoad          = 1.0
	DefaultMeanOutputTokens = 250
	DefaultMaxOutputTokens  = 2000
	DefaultOutputSigma      = 0.5
	DefaultHangTimeout      = 10 * time.Minute
	DefaultResetAfter       = 3
	DefaultRise             = 0.5
)

// Shape is how a provider's latency and refusals depend on its load.
type Shape string

// Shapes, usable in [Config.Shape] and the provider's -shape flag.
const (
	// ShapeQueue runs at most C requests at once and queues the rest
	// inside the provider; latency grows by the queue's wait (and by
	// SoftTTFT and ITLLoad); refusals beyond OverloadFactor*C running
	// and queued. The zero Shape is ShapeQueue.
	ShapeQueue Shape = "queue"
	// ShapeKnee runs every admitted request at once (processor sharing,
	// no queue inside the provider) and C is its knee: beyond C running,
	// time to first token and inter-token latency grow in proportion
	// (x running/C), so more concurrency buys only latency; refusals
	// beyond OverloadFactor*C running.
	ShapeKnee Shape = "knee"
	// ShapeNoKnee runs every request at once and never refuses for load:
	// time to first token and inter-token latency rise gently with it,
	// x (1 + Rise*running/C), as a host's processor fills, while
	// completions keep rising with concurrency. C is only the load at
	// which latency has risen by Rise.
	ShapeNoKnee Shape = "no-knee"
)

func (s Shape) valid() bool {
	switch s {
	case ShapeQueue, ShapeKnee, ShapeNoKnee:
		return true
	}
	return false
}

// ParseShape reads a shape's name ("" is ShapeQueue).
func ParseShape(v string) (Shape, error) {
	sh := Shape(v)
	if sh == "" {
		sh = ShapeQueue
	}
	if !sh.valid() {
		return "", fmt.Errorf("sim: unknown shape %q: want queue, knee or no-knee", v)
	}
	return sh, nil
}

// sharing reports whether every admitted request runs at once.
func (s Shape) sharing() bool { return s == ShapeKnee || s == ShapeNoKnee }

// Step is one entry of a capacity schedule: from At (model time since the
// schedule started) on, at most Capacity requests run at once. Capacity 0
// models an outage: every request is rejected as overloaded.
type Step struct {
	At       time.Duration
	Capacity int
}

// FaultKind names an injected failure.
type FaultKind string

// Fault kinds, usable in [Fault.Kind] and in the x-sim-fail request header.
const (
	// FaultNone means no fault.
	FaultNone FaultKind = ""
	// FaultReset drops the connection after [Fault.After] events of a stream
	// (no terminal event, no end of the chunked body). A non-stream request
	// is dropped without a response once its first token would be due.
	FaultReset FaultKind = "reset-mid-stream"
	// FaultHang sends nothing (not even headers) until the client goes away,
	// the server closes or [Config.HangTimeout] passes; then the connection
	// is dropped. A hanging request does not hold a capacity slot.
	FaultHang FaultKind = "hang"
	// Fault429, Fault500, Fault502, Fault503 and Fault529 answer at once with
	// that status and the dialect's error body. They hold no slot.
	Fault429 FaultKind = "429"
	Fault500 FaultKind = "500"
	Fault502 FaultKind = "502"
	Fault503 FaultKind = "503"
	Fault529 FaultKind = "529"
)

func (k FaultKind) valid() bool {
	switch k {
	case FaultNone, FaultReset, FaultHang, Fault429, Fault500, Fault502, Fault503, Fault529:
		return true
	}
	return false
}

// Fault is a failure injected into requests that carry no x-sim-fail header.
type Fault struct {
	// Kind is the failure; FaultNone disables injection.
	Kind FaultKind
	// Rate is the probability that a request gets the fault, drawn from the
	// request's seeded generator. Zero means every request (when Kind is set).
	Rate float64
	// After is the number of events written before a FaultReset drop;
	// zero means DefaultResetAfter.
	After int
}

// Config describes a simulated provider. Zero fields take the documented
// default; fields whose zero value is a meaningful setting say how to get
// "off" instead (usually a negative value). All durations are model time.
type Config struct {
	// Shape is how latency and refusals depend on load (see [Shape]).
	// Empty means ShapeQueue. A change by Update applies to arrivals.
	Shape Shape
	// Schedule is the capacity over time, sorted by At or not (New sorts a
	// copy). Steps are relative to New (or to the last SetSchedule). Empty
	// means a constant DefaultCapacity. Before the first step's At the
	// first step's capacity applies. Capacity 0 is an outage in every
	// shape. In ShapeKnee C is the knee; in ShapeNoKnee the load at which
	// latency has risen by Rise.
	Schedule []Step
	// OverloadFactor: a request is rejected when running+queued >=
	// OverloadFactor*C at its arrival. Zero means DefaultOverloadFactor;
	// negative disables overload rejection (the queue is unbounded).
	// ShapeNoKnee does not refuse for load whatever its value.
	OverloadFactor float64
	// Rise is how much ShapeNoKnee's latency has risen at C running: the
	// multiplier is 1 + Rise*running/C. Zero means DefaultRise; negative
	// means none (a flat provider with room for everything). Other shapes
	// ignore it.
	Rise float64
	// RetryAfter is the wait advertised on 429/529 rejections, sent as
	// retry-after (whole seconds of real time, rounded up) and
	// retry-after-ms (real milliseconds). Zero means DefaultRetryAfter;
	// negative omits both headers.
	RetryAfter time.Duration
	// RateLimitRPS is a hard limit on accepted requests per second (token
	// bucket, burst RateLimitBurst). Requests beyond it get 429 (OpenAI
	// rate_limit_exceeded, Anthropic rate_limit_error) with retry-after.
	// Zero disables it.
	RateLimitRPS float64
	// RateLimitBurst is the bucket size; zero means max(1, RateLimitRPS).
	RateLimitBurst int
	// Quota is the account's per-minute request and token limits,
	// reported in rate-limit headers (see [Quota]). Zero: none.
	Quota Quota
	// QuotaExhausted answers every request with the dialect's "no quota"
	// error: 429 insufficient_quota (OpenAI) or 400 invalid_request_error
	// "credit balance is too low" (Anthropic), without retry-after. This is
	// a billing failure, not congestion.
	QuotaExhausted bool
	// BaseTTFT is the fixed part of the time to first token once running.
	// Zero means DefaultBaseTTFT; negative means none.
	BaseTTFT time.Duration
	// PrefillRate is prompt tokens processed per second of model time.
	// Zero means DefaultPrefillRate; negative means prefill is free.
	PrefillRate float64
	// JitterSigma is the sigma of the lognormal TTFT multiplier (median 1).
	// Zero means DefaultJitterSigma; negative means no jitter.
	JitterSigma float64
	// SoftTTFT adds load sensitivity to TTFT: multiplier (1 + SoftTTFT*running/C).
	// Zero (the default) means none. ShapeQueue only: in the other shapes
	// the shape's slowdown is the load's effect.
	SoftTTFT float64
	// ITL is the base inter-token latency. Zero means DefaultITL; negative
	// means tokens follow each other without delay.
	ITL time.Duration
	// ITLLoad scales ITL with load: ITL*(1 + ITLLoad*running/C). Zero means
	// DefaultITLLoad; negative means ITL does not depend on load.
	// ShapeQueue only, as SoftTTFT.
	ITLLoad float64
	// ITLJitter is the sigma of a per-token lognormal ITL multiplier. Zero
	// (the default) means none.
	ITLJitter float64
	// MeanOutputTokens is the mean of the lognormal output length. Zero
	// means DefaultMeanOutputTokens.
	MeanOutputTokens int
	// OutputSigma is the sigma of the output length lognormal. Zero means
	// DefaultOutputSigma; negative makes every output exactly MeanOutputTokens.
	OutputSigma float64
	// MaxOutputTokens caps output length. Zero means DefaultMaxOutputTokens.
	MaxOutputTokens int
	// HangTimeout bounds a FaultHang request. Zero means DefaultHangTimeout.
	HangTimeout time.Duration
	// Fault is injected into requests without an x-sim-fail header.
	Fault Fault
	// TimeScale converts model time to real time (real = model*TimeScale):
	// 1 is real time, 0.1 is ten times faster. Zero or negative means 1.
	TimeScale float64
	// Seed seeds every request's generator (see package doc).
	Seed uint64
	// Clock returns the current real time; it positions the capacity
	// schedule, drives the rate-limit bucket and stamps "created" fields.
	// Nil means time.Now. Waits always use real timers, so with a custom
	// Clock schedule steps take effect at the next arrival, completion or
	// SetCapacity after the Clock passes them.
	Clock func() time.Time
	// Logger receives fasthttp server errors. Nil discards them.
	Logger interface {
		Printf(format string, args ...any)
	}
}

// withDefaults returns a copy of c with zero fields filled and negative
// "off" values normalised to their effective zero.
func (c Config) withDefaults() Config {
	if len(c.Schedule) == 0 {
		c.Schedule = []Step{{Capacity: DefaultCapacity}}
	}
	c.Schedule = sortedSteps(c.Schedule)
	if !c.Shape.valid() {
		c.Shape = ShapeQueue
	}
	c.Rise = floatDefault(c.Rise, DefaultRise)
	switch {
	case c.OverloadFactor == 0:
		c.OverloadFactor = DefaultOverloadFactor
	case c.OverloadFactor < 0:
		c.OverloadFactor = -1
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.RateLimitRPS < 0 {
		c.RateLimitRPS = 0
	}
	if c.RateLimitBurst <= 0 {
		c.RateLimitBurst = max(1, int(c.RateLimitRPS))
	}
	c.BaseTTFT = durDefault(c.BaseTTFT, DefaultBaseTTFT)
	c.PrefillRate = floatDefault(c.PrefillRate, DefaultPrefillRate)
	c.JitterSigma = floatDefault(c.JitterSigma, DefaultJitterSigma)
	c.ITL = durDefault(c.ITL, DefaultITL)
	c.ITLLoad = floatDefault(c.ITLLoad, DefaultITLLoad)
	c.OutputSigma = floatDefault(c.OutputSigma, DefaultOutputSigma)
	if c.SoftTTFT < 0 {
		c.SoftTTFT = 0
	}
	if c.ITLJitter < 0 {
		c.ITLJitter = 0
	}
	if c.MeanOutputTokens <= 0 {
		c.MeanOutputTokens = DefaultMeanOutputTokens
	}
	if c.MaxOutputTokens <= 0 {
		c.MaxOutputTokens = DefaultMaxOutputTokens
	}
	if c.HangTimeout <= 0 {
		c.HangTimeout = DefaultHangTimeout
	}
	if c.Fault.Rate <= 0 || c.Fault.Rate > 1 {
		c.Fault.Rate = 1
	}
	if c.Fault.After <= 0 {
		c.Fault.After = DefaultResetAfter
	}
	if !c.Fault.Kind.valid() {
		c.Fault.Kind = FaultNone
	}
	if c.TimeScale <= 0 {
		c.TimeScale = 1
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	return c
}

// durDefault maps 0 to def and negative to 0.
func durDefault(v, def time.Duration) time.Duration {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// floatDefault maps 0 to def and negative to 0.
func floatDefault(v, def float64) float64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// scale converts a model duration to real time.
func (c *Config) scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * c.TimeScale)
}

// Dialect is the wire format of a request, chosen by its path.
type Dialect int

// Dialects.
const (
	OpenAI    Dialect = iota + 1 // POST .../chat/completions
	Anthropic                    // POST .../messages
	Responses                    // POST .../responses (OpenAI Responses API)
)

func (d Dialect) String() string {
	switch d {
	case OpenAI:
		return "openai"
	case Anthropic:
		return "anthropic"
	case Responses:
		return "responses"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}
