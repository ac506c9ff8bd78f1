package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/settings"
)

var (
	resOK       = AttemptResult{Status: 200}
	res500      = AttemptResult{Status: 500, Class: feedback.ErrServer}
	resConnect  = AttemptResult{Failure: AttemptConnect}
	resQuota    = AttemptResult{Status: 429, Class: feedback.ErrInsufficientQuota}
	resRate     = AttemptResult{Status: 429, Class: feedback.ErrRateLimit}
	res400      = AttemptResult{Status: 400, Class: feedback.ErrInvalidRequest}
	resCanceled = AttemptResult{Failure: AttemptCanceled}
)

// pass runs one attempt through b at now and records r; it reports
// whether the breaker let it through.
func pass(b *Breaker, now time.Time, r AttemptResult) bool {
	t, ok := b.Allow(now)
	if ok {
		b.Record(now, t, r)
	}
	return ok
}

func wantState(t *testing.T, b *Breaker, now time.Time, want BreakerState) {
	t.Helper()
	if got := b.State(now); got != want {
		t.Fatalf("state %s, want %s", got, want)
	}
}

// TestBreakerStateMachine walks a breaker through every transition in
// virtual time: closed -> open on consecutive failures, nothing through
// while open, half-open after the open time with a bounded number of
// probes, open again on a failed probe, closed after enough successful
// probes.
func TestBreakerStateMachine(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	s := settings.DefaultBreaker() // 5 in a row, open 15 s, 3 probes
	b := newBreaker(s)
	for i := range 4 {
		pass(b, clk.Now(), res500)
		wantState(t, b, clk.Now(), BreakerClosed)
		if i == 1 {
			pass(b, clk.Now(), res400) // a client error breaks no run
		}
	}
	pass(b, clk.Now(), resOK) // a success does
	for range 4 {
		pass(b, clk.Now(), resConnect)
	}
	wantState(t, b, clk.Now(), BreakerClosed)
	pass(b, clk.Now(), resConnect)
	wantState(t, b, clk.Now(), BreakerOpen)
	if pass(b, clk.Now(), resOK) {
		t.Fatal("open breaker let an attempt through")
	}
	clk.Advance(s.OpenTime - time.Millisecond)
	if b.Available(clk.Now()) || b.OpenFor(clk.Now()) != time.Millisecond {
		t.Fatalf("open for %v before its time", b.OpenFor(clk.Now()))
	}
	clk.Advance(time.Millisecond)
	// Half-open: three probes at once, not four.
	var probes [3]Ticket
	for i := range probes {
		tk, ok := b.Allow(clk.Now())
		if !ok || !tk.Probe() {
			t.Fatalf("probe %d refused (ok %v probe %v)", i, ok, tk.Probe())
		}
		probes[i] = tk
	}
	wantState(t, b, clk.Now(), BreakerHalfOpen)
	if _, ok := b.Allow(clk.Now()); ok {
		t.Fatal("fourth probe let through")
	}
	// A probe that ends without a verdict frees its slot.
	b.Record(clk.Now(), probes[0], resCanceled)
	tk, ok := b.Allow(clk.Now())
	if !ok {
		t.Fatal("freed probe slot not reusable")
	}
	probes[0] = tk
	// One failed probe opens it again.
	b.Record(clk.Now(), probes[1], res500)
	wantState(t, b, clk.Now(), BreakerOpen)
	b.Record(clk.Now(), probes[2], resOK) // a probe of the old period: ignored
	b.Record(clk.Now(), probes[0], resOK)
	wantState(t, b, clk.Now(), BreakerOpen)
	clk.Advance(s.OpenTime)
	for i := range 3 {
		if !pass(b, clk.Now(), resOK) {
			t.Fatalf("probe %d refused", i)
		}
	}
	wantState(t, b, clk.Now(), BreakerClosed)
	if st := b.Stats(clk.Now()); st.Opened != 2 || st.QuotaOpened != 0 || st.ConsecutiveFailures != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBreakerFailureRatio: failures that never come five in a row open
// the breaker once half of at least min_requests attempts in the window
// failed, and not before; attempts older than the window do not count.
func TestBreakerFailureRatio(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	b := newBreaker(settings.DefaultBreaker()) // ratio 0.5, at least 20, window 10 s
	for range 9 {
		pass(b, clk.Now(), resOK)
		pass(b, clk.Now(), res500)
	}
	wantState(t, b, clk.Now(), BreakerClosed) // 18 attempts: too few to judge
	clk.Advance(11 * time.Second)             // they leave the window
	for range 9 {
		pass(b, clk.Now(), resOK)
		pass(b, clk.Now(), res500)
	}
	wantState(t, b, clk.Now(), BreakerClosed) // 18 in the window, not 36
	pass(b, clk.Now(), resOK)
	wantState(t, b, clk.Now(), BreakerClosed) // 19
	pass(b, clk.Now(), res500)
	wantState(t, b, clk.Now(), BreakerOpen) // 20, 10 failed
}

// TestBreakerQuotaOpensAtOnce: a billing error opens the breaker on the
// spot, for quota_open_time.
func TestBreakerQuotaOpensAtOnce(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	s := settings.DefaultBreaker()
	b := newBreaker(s)
	pass(b, clk.Now(), resQuota)
	wantState(t, b, clk.Now(), BreakerOpen)
	clk.Advance(s.OpenTime)
	wantState(t, b, clk.Now(), BreakerOpen)
	clk.Advance(s.QuotaOpenTime - s.OpenTime)
	wantState(t, b, clk.Now(), BreakerHalfOpen)
	if st := b.Stats(clk.Now()); st.QuotaOpened != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBreakerNeverOnClientErrors: client errors, rate limiting and
// cancellations never open it, however many.
func TestBreakerNeverOnClientErrors(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	b := newBreaker(settings.DefaultBreaker())
	for _, r := range []AttemptResult{res400, resRate, resCanceled,
		{Status: 401, Class: feedback.ErrAuth}, {Status: 403, Class: feedback.ErrAuth},
		{Status: 404, Class: feedback.ErrNotFound}, {Status: 413, Class: feedback.ErrInvalidRequest},
		{Status: 422, Class: feedback.ErrInvalidRequest}} {
		for range 50 {
			pass(b, clk.Now(), r)
		}
		wantState(t, b, clk.Now(), BreakerClosed)
	}
}

// TestBreakerStaleResults: an attempt let through before the breaker
// opened does not count after it: its failure does not extend the open
// time, its success does not close the breaker.
func TestBreakerStaleResults(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	s := settings.DefaultBreaker()
	s.ConsecutiveFailures = 1
	b := newBreaker(s)
	slow, _ := b.Allow(clk.Now())
	pass(b, clk.Now(), res500)
	wantState(t, b, clk.Now(), BreakerOpen)
	until := b.OpenFor(clk.Now())
	clk.Advance(time.Second)
	b.Record(clk.Now(), slow, res500)
	if got := b.OpenFor(clk.Now()); got != until-time.Second {
		t.Fatalf("stale failure moved the open time: %v left, want %v", got, until-time.Second)
	}
	clk.Advance(s.OpenTime)
	b.Record(clk.Now(), slow, resOK)
	wantState(t, b, clk.Now(), BreakerHalfOpen)
}

// TestBreakerVerdicts is the classification table.
func TestBreakerVerdicts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		r    AttemptResult
		want breakerVerdict
	}{
		{resOK, verdictSuccess},
		{AttemptResult{Status: 200, Class: feedback.ErrRateLimit}, verdictSuccess},
		{AttemptResult{Status: 200, Class: feedback.ErrOverloaded}, verdictFailure},
		{AttemptResult{Status: 200, Class: feedback.ErrServer}, verdictFailure},
		{res500, verdictFailure},
		{AttemptResult{Status: 502}, verdictFailure},
		{AttemptResult{Status: 503, Class: feedback.ErrUnavailable}, verdictFailure},
		{AttemptResult{Status: 529, Class: feedback.ErrOverloaded}, verdictFailure},
		{resConnect, verdictFailure},
		{AttemptResult{Failure: AttemptReset}, verdictFailure},
		{AttemptResult{Failure: AttemptTimeout, Class: feedback.ErrTimeout}, verdictFailure},
		{AttemptResult{Failure: AttemptBroke, Status: 200}, verdictFailure},
		{resQuota, verdictQuota},
		{AttemptResult{Status: 200, Class: feedback.ErrInsufficientQuota}, verdictQuota},
		{resRate, verdictNeutral},
		{res400, verdictNeutral},
		{AttemptResult{Status: 401, Class: feedback.ErrAuth}, verdictNeutral},
		{resCanceled, verdictNeutral},
	} {
		if got := MeaningOf(c.r).Breaker; got != c.want {
			t.Errorf("%+v: verdict %d, want %d", c.r, got, c.want)
		}
	}
}
