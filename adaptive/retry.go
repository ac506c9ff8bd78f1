package adaptive

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// RetryPolicy decides whether a failed attempt is tried again, and when.
// It holds the provider's retry budget. Safe for concurrent use; Decide
// and Request are lock-free and allocation-free.
type RetryPolicy struct {
	set     atomic.Pointer[settings.Retries]
	budget  slotRing // a = requests, b = retries
	rnd     func() float64
	decided [NumRetryReasons]atomic.Uint64 // Decide's answers, by reason
}

// NewRetryPolicy returns a policy with settings s. rnd returns uniform
// numbers in [0, 1) for the backoff jitter (nil: math/rand/v2's
// Float64); tests inject their own.
func NewRetryPolicy(s settings.Retries, rnd func() float64) *RetryPolicy {
	if rnd == nil {
		rnd = rand.Float64
	}
	p := &RetryPolicy{rnd: rnd}
	p.Reconfigure(s)
	return p
}

// Reconfigure applies new settings. The budget's counts are kept unless
// its window changed.
func (p *RetryPolicy) Reconfigure(s settings.Retries) {
	p.set.Store(&s)
	p.budget.setWindow(s.BudgetWindow)
}

// Settings returns the settings in force.
func (p *RetryPolicy) Settings() settings.Retries { return *p.set.Load() }

// MaxAttempts returns the most attempts a request may make (1: no
// retries).
func (p *RetryPolicy) MaxAttempts() int { return p.set.Load().MaxAttempts }

// Request counts one client request at now into the budget. Call it once
// per request that reaches an upstream attempt (retries are not requests).
func (p *RetryPolicy) Request(now time.Time) { p.budget.add(now, 1, 0) }

// RetryContext is what Decide needs to know about the request besides the
// attempt's result.
type RetryContext struct {
	// Attempts is the number of attempts made so far, the failed one
	// included (1 after the first).
	Attempts int
	// ClientStarted is true once any byte of the response (status line
	// included) was written to the client: from then on, a second attempt
	// would send the client bytes from two attempts, so there is none.
	ClientStarted bool
	// Deadline is when the request's time runs out (zero: no deadline).
	// No retry is started that could not begin before it.
	Deadline time.Time
	// Alternatives is true when another upstream of the provider could
	// take the retry now (UpstreamSet.HasAlternative).
	Alternatives bool
}

// RetryReason says why Decide did or did not retry, for metrics.
type RetryReason uint8

const (
	RetryYes           RetryReason = iota // retried
	RetryNotFailed                        // the attempt did not fail
	RetryNotRetryable                     // a failure a retry does not fix (4xx, quota, context length, ...)
	RetryClientStarted                    // bytes already reached the client
	RetryMaxAttempts                      // max_attempts reached
	RetryNoAlternative                    // only another upstream could help, and there is none
	RetryAfterTooLong                     // the upstream asked to wait longer than max_retry_after
	RetryDeadline                         // the wait would end past the request's deadline
	RetryBudget                           // the retry budget is spent
	// NumRetryReasons bounds RetryReason values.
	NumRetryReasons
)

// String returns the metric label value of r.
func (r RetryReason) String() string {
	return [...]string{"retried", "not_failed", "not_retryable", "client_started", "max_attempts",
		"no_alternative", "retry_after_too_long", "deadline", "budget", "unknown"}[min(r, NumRetryReasons)]
}

// RetryDecision is Decide's answer.
type RetryDecision struct {
	Retry bool
	// Wait is how long to wait before the retry (backoff, or the
	// upstream's Retry-After when the retry must go back to it).
	Wait time.Duration
	// Elsewhere says the retry must go to another upstream (pass the
	// failed one as avoid, strict, to Pick).
	Elsewhere bool
	Reason    RetryReason
}

// Decide says whether to retry the request whose latest attempt ended
// with r, checking in order: the attempt failed; nothing reached the
// client; the failure is retryable (the answer table's Retry column, answer.go);
// an upstream that can take it exists; attempts are left; the wait (exponential backoff with
// full jitter, after the upstream's Retry-After if the retry must go back
// to it) ends before the deadline, its Retry-After within
// max_retry_after; the budget allows one more retry (retries in the
// window below budget_ratio x requests + min_per_second x window). A yes
// takes one retry from the budget.
//
// A Retry-After names the upstream that sent it: when another upstream
// can take the retry, it goes there after the backoff alone.
func (p *RetryPolicy) Decide(now time.Time, r AttemptResult, c RetryContext) RetryDecision {
	d := p.decide(now, r, c)
	p.decided[d.Reason].Add(1)
	return d
}

func (p *RetryPolicy) decide(now time.Time, r AttemptResult, c RetryContext) RetryDecision {
	s := p.set.Load()
	m := MeaningOf(r)
	switch {
	case !m.Failed:
		return RetryDecision{Reason: RetryNotFailed}
	case c.ClientStarted:
		return RetryDecision{Reason: RetryClientStarted}
	}
	class := m.Retry
	switch {
	case class == retryNever:
		return RetryDecision{Reason: RetryNotRetryable}
	case class == retryElsewhere && !c.Alternatives:
		return RetryDecision{Reason: RetryNoAlternative}
	case c.Attempts >= s.MaxAttempts:
		return RetryDecision{Reason: RetryMaxAttempts}
	}
	d := RetryDecision{Wait: p.backoff(s, c.Attempts), Elsewhere: class == retryElsewhere}
	if ra := r.Outcome.RetryAfter; ra > 0 {
		if c.Alternatives {
			d.Elsewhere = true
		} else if ra > s.MaxRetryAfter {
			return RetryDecision{Reason: RetryAfterTooLong}
		} else {
			// After the Retry-After, plus the jittered backoff: the
			// requests refused together were told the same Retry-After,
			// and sent back the moment it ended they are the same burst
			// again.
			d.Wait += ra
		}
	}
	if !c.Deadline.IsZero() && !now.Add(d.Wait).Before(c.Deadline) {
		return RetryDecision{Reason: RetryDeadline}
	}
	if !p.takeRetry(now, s) {
		return RetryDecision{Reason: RetryBudget}
	}
	d.Retry, d.Reason = true, RetryYes
	return d
}

// backoff returns a random wait in [0, min(max, base x 2^(attempts-1))).
func (p *RetryPolicy) backoff(s *settings.Retries, attempts int) time.Duration {
	ceil := s.BackoffBase
	for i := 1; i < attempts && ceil < s.BackoffMax; i++ {
		ceil *= 2
	}
	ceil = min(ceil, s.BackoffMax)
	return time.Duration(p.rnd() * float64(ceil))
}

// takeRetry withdraws one retry from the budget at now, if there is one.
// Concurrent withdrawals may overshoot by the number of racing callers.
func (p *RetryPolicy) takeRetry(now time.Time, s *settings.Retries) bool {
	reqs, retries := p.budget.sum(now)
	allowed := s.BudgetRatio*float64(reqs) + s.MinPerSecond*s.BudgetWindow.Seconds()
	if float64(retries+1) > allowed {
		return false
	}
	p.budget.add(now, 0, 1)
	return true
}

// BudgetStats returns the requests and retries counted in the budget's
// window at now.
func (p *RetryPolicy) BudgetStats(now time.Time) (requests, retries int64) {
	return p.budget.sum(now)
}

// RetryStats are a retry policy's counters, for metrics and the status
// page.
type RetryStats struct {
	// Decisions counts Decide's answers by reason: RetryYes are the
	// retries made, RetryBudget the retries the budget refused.
	Decisions [NumRetryReasons]uint64
	// WindowRequests and WindowRetries are the budget's counts over its
	// window (requests that reached an upstream, retries made).
	WindowRequests, WindowRetries int64
}

// Stats returns the policy's counters at now.
func (p *RetryPolicy) Stats(now time.Time) RetryStats {
	var s RetryStats
	for i := range s.Decisions {
		s.Decisions[i] = p.decided[i].Load()
	}
	s.WindowRequests, s.WindowRetries = p.budget.sum(now)
	return s
}
