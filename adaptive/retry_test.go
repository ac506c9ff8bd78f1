package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/settings"
)

// halfRand is injected randomness: the jitter is always half the
// backoff ceiling.
func halfRand() float64 { return 0.5 }

// TestRetryDecide is the retry table: which outcomes are retried, where,
// after how long, and every reason not to.
func TestRetryDecide(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	ra := func(r AttemptResult, d time.Duration) AttemptResult { r.Outcome.RetryAfter = d; return r }
	fresh := RetryContext{Attempts: 1, Deadline: now.Add(time.Minute), Alternatives: true}
	alone := fresh
	alone.Alternatives = false
	started := fresh
	started.ClientStarted = true
	last := fresh
	last.Attempts = 2
	tight := fresh
	tight.Deadline = now.Add(100 * time.Millisecond)
	st := func(status int, class feedback.ErrorClass) AttemptResult {
		return AttemptResult{Status: status, Class: class}
	}
	fail := func(f AttemptFailure) AttemptResult { return AttemptResult{Failure: f} }
	const backoff1 = 125 * time.Millisecond // half of the 250 ms base
	for _, c := range []struct {
		name      string
		r         AttemptResult
		c         RetryContext
		retry     bool
		wait      time.Duration
		elsewhere bool
		reason    RetryReason
	}{
		{"success", st(200, feedback.ErrNone), fresh, false, 0, false, RetryNotFailed},
		{"connect error", fail(AttemptConnect), fresh, true, backoff1, false, RetryYes},
		{"connect error, one upstream", fail(AttemptConnect), alone, true, backoff1, false, RetryYes},
		{"reset before headers", fail(AttemptReset), alone, true, backoff1, false, RetryYes},
		{"429 rate limit", st(429, feedback.ErrRateLimit), alone, true, backoff1, false, RetryYes},
		{"529 overloaded", st(529, feedback.ErrOverloaded), alone, true, backoff1, false, RetryYes},
		{"503 unavailable", st(503, feedback.ErrUnavailable), alone, true, backoff1, false, RetryYes},
		{"overloaded error in a 200 body", st(200, feedback.ErrOverloaded), alone, true, backoff1, false, RetryYes},
		{"500 goes elsewhere", st(500, feedback.ErrServer), fresh, true, backoff1, true, RetryYes},
		{"502 goes elsewhere", st(502, feedback.ErrServer), fresh, true, backoff1, true, RetryYes},
		{"504 goes elsewhere", st(504, feedback.ErrOther), fresh, true, backoff1, true, RetryYes},
		{"first-token timeout goes elsewhere", fail(AttemptTimeout), fresh, true, backoff1, true, RetryYes},
		{"500 with no other upstream", st(500, feedback.ErrServer), alone, false, 0, false, RetryNoAlternative},
		{"timeout with no other upstream", fail(AttemptTimeout), alone, false, 0, false, RetryNoAlternative},
		{"400", st(400, feedback.ErrInvalidRequest), fresh, false, 0, false, RetryNotRetryable},
		{"401", st(401, feedback.ErrAuth), fresh, false, 0, false, RetryNotRetryable},
		{"403", st(403, feedback.ErrAuth), fresh, false, 0, false, RetryNotRetryable},
		{"404", st(404, feedback.ErrNotFound), fresh, false, 0, false, RetryNotRetryable},
		{"413", st(413, feedback.ErrInvalidRequest), fresh, false, 0, false, RetryNotRetryable},
		{"422", st(422, feedback.ErrInvalidRequest), fresh, false, 0, false, RetryNotRetryable},
		{"429 insufficient_quota", st(429, feedback.ErrInsufficientQuota), fresh, false, 0, false, RetryNotRetryable},
		{"context length in a 400", st(400, feedback.ErrInvalidRequest), fresh, false, 0, false, RetryNotRetryable},
		{"invalid request named in a 500 body", st(500, feedback.ErrInvalidRequest), fresh, false, 0, false, RetryNotRetryable},
		{"connection broke mid-body", AttemptResult{Failure: AttemptBroke, Status: 200}, fresh, false, 0, false, RetryNotRetryable},
		{"client canceled", fail(AttemptCanceled), fresh, false, 0, false, RetryNotRetryable},
		{"503 after the first byte", st(503, feedback.ErrUnavailable), started, false, 0, false, RetryClientStarted},
		{"reset after the first byte", fail(AttemptReset), started, false, 0, false, RetryClientStarted},
		{"max attempts", st(503, feedback.ErrUnavailable), last, false, 0, false, RetryMaxAttempts},
		{"Retry-After honoured on the same upstream, then the backoff", ra(st(429, feedback.ErrRateLimit), 3*time.Second), alone, true, 3*time.Second + backoff1, false, RetryYes},
		{"Retry-After shorter than the backoff", ra(st(429, feedback.ErrRateLimit), 10*time.Millisecond), alone, true, 10*time.Millisecond + backoff1, false, RetryYes},
		{"Retry-After too long", ra(st(429, feedback.ErrRateLimit), 11*time.Second), alone, false, 0, false, RetryAfterTooLong},
		{"Retry-After names its upstream: go elsewhere", ra(st(503, feedback.ErrUnavailable), 30*time.Second), fresh, true, backoff1, true, RetryYes},
		{"backoff past the deadline", st(503, feedback.ErrUnavailable), tight, false, 0, false, RetryDeadline},
		{"Retry-After past the deadline", ra(st(529, feedback.ErrOverloaded), 5*time.Second), func() RetryContext { c := alone; c.Deadline = now.Add(4 * time.Second); return c }(), false, 0, false, RetryDeadline},
	} {
		p := NewRetryPolicy(settings.DefaultRetries(), halfRand)
		p.Request(now)
		got := p.Decide(now, c.r, c.c)
		if got.Retry != c.retry || got.Reason != c.reason || got.Elsewhere != c.elsewhere || (c.retry && got.Wait != c.wait) {
			t.Errorf("%s: %+v (%s), want retry %v wait %v elsewhere %v reason %s", c.name, got, got.Reason, c.retry, c.wait, c.elsewhere, c.reason)
		}
	}
}

// TestRetryBudget: retries stay within budget_ratio of recent requests
// plus min_per_second, and the budget recovers as the window moves on.
func TestRetryBudget(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	s := settings.DefaultRetries()
	s.BudgetRatio, s.MinPerSecond, s.BudgetWindow = 0.2, 0.5, 10*time.Second // 5 free retries per window
	p := NewRetryPolicy(s, halfRand)
	ctx := RetryContext{Attempts: 1, Alternatives: true}
	r := AttemptResult{Failure: AttemptConnect}
	for range 100 {
		p.Request(clk.Now())
	}
	retried := 0
	for range 100 {
		if d := p.Decide(clk.Now(), r, ctx); d.Retry {
			retried++
		} else if d.Reason != RetryBudget {
			t.Fatalf("refused for %s", d.Reason)
		}
	}
	if want := 25; retried != want { // 0.2 x 100 + 0.5 x 10
		t.Fatalf("%d retries for 100 requests, want %d", retried, want)
	}
	if reqs, retries := p.BudgetStats(clk.Now()); reqs != 100 || retries != 25 {
		t.Fatalf("budget stats %d requests %d retries", reqs, retries)
	}
	clk.Advance(11 * time.Second)
	if d := p.Decide(clk.Now(), r, ctx); !d.Retry {
		t.Fatalf("budget did not recover: %s", d.Reason)
	}
}

// TestRetryBackoff: exponential with full jitter, capped.
func TestRetryBackoff(t *testing.T) {
	t.Parallel()
	s := settings.DefaultRetries() // 250 ms .. 5 s
	s.MaxAttempts = 10
	for _, c := range []struct {
		rnd      float64
		attempts int
		want     time.Duration
	}{
		{0, 1, 0},
		{0.999999, 1, 249999750 * time.Nanosecond},
		{0.5, 1, 125 * time.Millisecond},
		{0.5, 2, 250 * time.Millisecond},
		{0.5, 3, 500 * time.Millisecond},
		{0.5, 6, 2500 * time.Millisecond}, // 8 s capped at 5 s
		{0.5, 9, 2500 * time.Millisecond},
	} {
		p := NewRetryPolicy(s, func() float64 { return c.rnd })
		if got := p.backoff(p.set.Load(), c.attempts); got != c.want {
			t.Errorf("rnd %v attempts %d: backoff %v, want %v", c.rnd, c.attempts, got, c.want)
		}
	}
}
