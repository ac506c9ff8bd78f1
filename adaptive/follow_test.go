package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/settings"
)

// followSet builds a one-upstream set that follows provider headers.
func followSet(t testing.TB, clk control.Clock, q settings.PerMinute) *UpstreamSet {
	t.Helper()
	s, err := NewUpstreamSet(clk, settings.DefaultLimit(), settings.DefaultBreaker(), []settings.Upstream{{Name: "u", Weight: 1, Rate: q}}, true)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reserveAndSend reserves d and picks the set's upstream: the request is
// sent at now.
func reserveAndSend(t testing.TB, now time.Time, r *Rates, s *UpstreamSet, d Demand, res *Reservation, a *Attempt) {
	t.Helper()
	if dec := r.Reserve(now, 0, d, s, time.Hour, res); dec.Limited || dec.TooLarge {
		t.Fatalf("reserve refused: %+v", dec)
	}
	if p := s.Pick(now, res, nil, nil, false, a); !p.OK {
		t.Fatalf("pick failed: %+v", p)
	}
}

func openAIHeaders(limitReq, remReq, limitTok, remTok int64, resetTok time.Duration) *feedback.RateLimits {
	all := feedback.HasLimit | feedback.HasRemaining | feedback.HasReset
	return &feedback.RateLimits{
		Requests: feedback.RateLimit{Limit: limitReq, Remaining: remReq, Has: feedback.HasLimit | feedback.HasRemaining},
		Tokens:   feedback.RateLimit{Limit: limitTok, Remaining: remTok, Reset: resetTok, Has: all},
	}
}

// TestLearnSubtractsWhatTheProviderHasNotSeen: a response's remaining
// count is as of when the provider admitted that request; requests sent
// after it, and those reserved but not sent, are subtracted.
func TestLearnSubtractsWhatTheProviderHasNotSeen(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	r := NewRates(settings.DefaultRate(), clk)
	s := followSet(t, clk, settings.PerMinute{})
	up := s.Upstreams()[0]
	d := Demand{InputTokens: 600, OutputTokens: 400} // 1000 tokens
	var res [4]Reservation
	var att [3]Attempt
	for i := range att { // three sent, in order
		reserveAndSend(t, now, r, s, d, &res[i], &att[i])
	}
	// One more reserved, waiting for its turn, not sent.
	if dec := r.Reserve(now, 0, d, s, time.Hour, &res[3]); dec.Limited {
		t.Fatal(dec)
	}
	// The provider answered the first: 40000 - 1000 tokens left, 59
	// requests (it had seen only that one).
	if !att[0].Learn(now, 200, feedback.ErrNone, openAIHeaders(60, 59, 40000, 39000, 1500*time.Millisecond), 0) {
		t.Fatal("headers not applied")
	}
	// Unseen: two sent after it, one reserved: 3000 tokens, 3 requests.
	// And 5% of the capacity is kept in hand (learnMarginPercent).
	if lv := quotaLevel(t, up.Quota(), now, DimTokens); lv != 34000 {
		t.Errorf("tokens level %d, want 39000 - 3000 unseen - 2000 margin = 34000", lv)
	}
	if lv := quotaLevel(t, up.Quota(), now, DimRequests); lv != 53 {
		t.Errorf("requests level %d, want 59 - 3 unseen - 3 margin = 53", lv)
	}
	if w := up.Quota().Window(DimTokens); w != time.Minute {
		t.Errorf("tokens window %v, want 1m (1000 of 40000 missing, full in 1.5s)", w)
	}
	// Older news (the first request's response arriving after the
	// third's) is ignored.
	if !att[2].Learn(now, 200, feedback.ErrNone, openAIHeaders(60, 57, 40000, 37000, 4500*time.Millisecond), 0) {
		t.Fatal("fresher headers not applied")
	}
	if att[1].Learn(now, 200, feedback.ErrNone, openAIHeaders(60, 59, 40000, 39999, 0), 0) {
		t.Error("older headers applied over fresher ones")
	}
	if lv := quotaLevel(t, up.Quota(), now, DimTokens); lv != 34000 {
		t.Errorf("tokens level %d after the third's headers, want 37000 - 1000 reserved - 2000 = 34000", lv)
	}
	// The waiting one is given up: it is no longer unseen.
	res[3].Settle(now, Usage{})
	if lv := quotaLevel(t, up.Quota(), now, DimTokens); lv != 35000 {
		t.Errorf("tokens level %d after the waiting request left, want 35000", lv)
	}
	// Time refills at the learned rate: 40000 per minute.
	clk.Advance(3 * time.Second)
	if lv := quotaLevel(t, up.Quota(), clk.Now(), DimTokens); lv != 37000 {
		t.Errorf("tokens level %d 3 s later, want 37000", lv)
	}
	for i := range att {
		att[i].Finish(clk.Now(), AttemptResult{Status: 200, Outcome: Outcome{Kind: OutcomeSuccess}, Usage: Usage{Sent: true, InputTokens: 600, OutputTokens: 100}})
		res[i].Settle(clk.Now(), Usage{Sent: true, InputTokens: 600, OutputTokens: 100})
	}
	// A mirror keeps what the provider took: used less, nothing back.
	if lv := quotaLevel(t, up.Quota(), clk.Now(), DimTokens); lv != 37000 {
		t.Errorf("tokens level %d after settling under budget, want 37000 (no refund)", lv)
	}
}

// TestLearnAnthropicUsesInputAndOutput: with input and output tokens
// reported, "tokens" (their most restrictive) is not a bucket; windows
// are learned from RFC 3339 resets rounded to the second.
func TestLearnAnthropicUsesInputAndOutput(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	r := NewRates(settings.DefaultRate(), clk)
	s := followSet(t, clk, settings.PerMinute{})
	up := s.Upstreams()[0]
	var res Reservation
	var a Attempt
	reserveAndSend(t, now, r, s, Demand{InputTokens: 8000, OutputTokens: 1000}, &res, &a)
	var rl feedback.RateLimits
	for _, h := range [][2]string{
		{"anthropic-ratelimit-requests-limit", "50"}, {"anthropic-ratelimit-requests-remaining", "49"},
		{"anthropic-ratelimit-input-tokens-limit", "40000"}, {"anthropic-ratelimit-input-tokens-remaining", "32000"},
		{"anthropic-ratelimit-input-tokens-reset", now.Add(12 * time.Second).UTC().Format(time.RFC3339)},
		{"anthropic-ratelimit-output-tokens-limit", "8000"}, {"anthropic-ratelimit-output-tokens-remaining", "7000"},
		{"anthropic-ratelimit-output-tokens-reset", now.Add(8 * time.Second).UTC().Format(time.RFC3339)},
		{"anthropic-ratelimit-tokens-limit", "8000"}, {"anthropic-ratelimit-tokens-remaining", "7000"},
	} {
		rl.Header([]byte(h[0]), []byte(h[1]), now)
	}
	if !a.Learn(now, 200, feedback.ErrNone, &rl, 0) {
		t.Fatal("not applied")
	}
	if _, _, ok := up.Quota().Level(now, DimTokens); ok {
		t.Error("tokens became a bucket although input and output were reported")
	}
	for _, c := range []struct {
		d      Dim
		lv, cp int64
	}{{DimRequests, 49 - 3, 50}, {DimInput, 32000 - 2000, 40000}, {DimOutput, 7000 - 400, 8000}} { // less 5% margin
		lv, cp, ok := up.Quota().Level(now, c.d)
		if !ok || lv != c.lv || cp != c.cp {
			t.Errorf("%s: level %d capacity %d (ok %v), want %d of %d", c.d, lv, cp, ok, c.lv, c.cp)
		}
		if w := up.Quota().Window(c.d); w != time.Minute {
			t.Errorf("%s: window %v, want 1m", c.d, w)
		}
	}
}

// TestLearnWindow: reset times tell the window a limit counts over.
func TestLearnWindow(t *testing.T) {
	t.Parallel()
	all := feedback.HasLimit | feedback.HasRemaining | feedback.HasReset
	for _, c := range []struct {
		lim, rem int64
		reset    time.Duration
		want     time.Duration
	}{
		{40000, 30000, 15 * time.Second, time.Minute},
		{40000, 38000, 3 * time.Second, time.Minute},
		{200, 190, 72 * time.Minute, 24 * time.Hour}, // a per-day limit
		{100, 50, 30 * time.Minute, time.Hour},
		{10, 5, 500 * time.Millisecond, time.Second},
		{40000, 39999, 10 * time.Second, time.Minute}, // deficit too small to trust: kept
		{40000, 30000, 100 * time.Millisecond, time.Minute},
	} {
		got := learnWindow(feedback.RateLimit{Limit: c.lim, Remaining: c.rem, Reset: c.reset, Has: all}, time.Minute)
		if got != c.want {
			t.Errorf("limit %d remaining %d reset %v: window %v, want %v", c.lim, c.rem, c.reset, got, c.want)
		}
	}
}
