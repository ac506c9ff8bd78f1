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
// adaptive never imports fasthttp, OpenTelemetry or the config package: it
// takes its settings as the settings package's types, and the controller's
// vocabulary (Controller, Sample, Clock) is package control's.
package adaptive

import "time"

// SystemClock is the control.Clock of a running proxy: it reads the
// monotonic wall clock. Controllers and the limiter never call time.Now
// directly, so tests can run them in virtual time on a clock of their own.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Pacer is a control.Controller that may space dispatches in time. PaceWait takes
// the next dispatch slot at now if it comes within at most within, and
// returns how long the dispatch must wait for it (0: send now); when the
// slot is further away it takes nothing and returns false, with the wait
// it would have had. A dispatch that waits keeps its permit, and is sent
// at its slot or not at all. Safe for concurrent use.
type Pacer interface {
	PaceWait(now time.Time, within time.Duration) (time.Duration, bool)
}
