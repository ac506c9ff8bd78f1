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

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/settings"
)

// Clock is the time source. Controllers and the limiter never call
// time.Now directly, so tests can run them in virtual time.
type Clock = control.Clock

// SystemClock reads the monotonic wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Pacer is a Controller that may space dispatches in time. PaceWait takes
// the next dispatch slot at now if it comes within at most within, and
// returns how long the dispatch must wait for it (0: send now); when the
// slot is further away it takes nothing and returns false, with the wait
// it would have had. A dispatch that waits keeps its permit, and is sent
// at its slot or not at all. Safe for concurrent use.
type Pacer interface {
	PaceWait(now time.Time, within time.Duration) (time.Duration, bool)
}

// The controller's vocabulary, declared with the maths in package control
// (which imports nothing of adaptive's), under the names the limiter's
// callers use.
type (
	// Controller computes a provider's concurrency limit from feedback
	// (control.Controller).
	Controller = control.Controller
	// ControllerState is a snapshot of a controller's parts
	// (control.State).
	ControllerState = control.State
	// Sample is one piece of feedback about a request that held a permit
	// (control.Sample).
	Sample = control.Sample
	// SampleKind says which signal a Sample carries.
	SampleKind = control.SampleKind
	// DropKind says why a request counted as a drop.
	DropKind = control.DropKind
	// Baseline is a learned TTFT baseline as a fleet of replicas shares
	// it (control.Baseline).
	Baseline = control.Baseline
)

// Sample kinds (control.SampleKind).
const (
	FirstToken = control.FirstToken
	Dropped    = control.Dropped
	TokenRate  = control.TokenRate
	Answered   = control.Answered
)

// Drop kinds (control.DropKind).
const (
	DropNone        = control.DropNone
	DropRateLimit   = control.DropRateLimit
	DropOverloaded  = control.DropOverloaded
	DropUnavailable = control.DropUnavailable
	DropTimeout     = control.DropTimeout
	NumDropKinds    = control.NumDropKinds
)

// NewController returns the controller for s.Algorithm (control.New).
func NewController(s settings.Limit, clk Clock) (Controller, error) { return control.New(s, clk) }

// MedianBaseline is the field-wise median of bs (control.MedianBaseline).
func MedianBaseline(bs []Baseline) Baseline { return control.MedianBaseline(bs) }
