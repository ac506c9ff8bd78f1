package feedback

import (
	"strings"
	"testing"
	"time"
)

var rlNow = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// headers feeds name/value pairs to a fresh RateLimits.
func headers(kv ...string) (RateLimits, int) {
	var r RateLimits
	n := 0
	for i := 0; i+1 < len(kv); i += 2 {
		if r.Header([]byte(kv[i]), []byte(kv[i+1]), rlNow) {
			n++
		}
	}
	return r, n
}

// TestRateLimitsOpenAI: the six OpenAI headers fill requests and tokens,
// with Go-syntax reset durations.
func TestRateLimitsOpenAI(t *testing.T) {
	t.Parallel()
	r, n := headers(
		"x-ratelimit-limit-requests", "60",
		"x-ratelimit-limit-tokens", "40000",
		"x-ratelimit-remaining-requests", "59",
		"x-ratelimit-remaining-tokens", "39000",
		"x-ratelimit-reset-requests", "1s",
		"x-ratelimit-reset-tokens", "1.5s",
		"content-type", "text/event-stream",
		"retry-after", "3",
	)
	if n != 6 {
		t.Fatalf("understood %d headers, want 6", n)
	}
	want := RateLimits{
		Requests: RateLimit{Limit: 60, Remaining: 59, Reset: time.Second, Has: HasLimit | HasRemaining | HasReset},
		Tokens:   RateLimit{Limit: 40000, Remaining: 39000, Reset: 1500 * time.Millisecond, Has: HasLimit | HasRemaining | HasReset},
	}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
}

// TestRateLimitsAnthropic: the twelve Anthropic headers, RFC 3339 resets
// taken relative to now.
func TestRateLimitsAnthropic(t *testing.T) {
	t.Parallel()
	reset := rlNow.Add(2 * time.Second).Format(time.RFC3339)
	r, n := headers(
		"anthropic-ratelimit-requests-limit", "50",
		"anthropic-ratelimit-requests-remaining", "49",
		"anthropic-ratelimit-requests-reset", reset,
		"anthropic-ratelimit-tokens-limit", "90000",
		"anthropic-ratelimit-tokens-remaining", "80000",
		"anthropic-ratelimit-tokens-reset", reset,
		"Anthropic-RateLimit-Input-Tokens-Limit", "50000",
		"anthropic-ratelimit-input-tokens-remaining", "49000",
		"anthropic-ratelimit-input-tokens-reset", "2026-05-01T12:00:01.5Z",
		"anthropic-ratelimit-output-tokens-limit", "10000",
		"anthropic-ratelimit-output-tokens-remaining", "9500",
		"anthropic-ratelimit-output-tokens-reset", "2026-05-01T14:00:03+02:00",
	)
	if n != 12 {
		t.Fatalf("understood %d headers, want 12", n)
	}
	all := HasLimit | HasRemaining | HasReset
	want := RateLimits{
		Requests:     RateLimit{50, 49, 2 * time.Second, all},
		Tokens:       RateLimit{90000, 80000, 2 * time.Second, all},
		InputTokens:  RateLimit{50000, 49000, 1500 * time.Millisecond, all},
		OutputTokens: RateLimit{10000, 9500, 3 * time.Second, all},
	}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
}

// TestRateLimitValues: each accepted form of a value, and the rejected
// ones (which leave the field unset).
func TestRateLimitValues(t *testing.T) {
	t.Parallel()
	resets := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"6m0s", 6 * time.Minute, true},
		{"1s", time.Second, true},
		{"20ms", 20 * time.Millisecond, true},
		{"1h2m3.5s", time.Hour + 2*time.Minute + 3500*time.Millisecond, true},
		{"500us", 500 * time.Microsecond, true},
		{"500µs", 500 * time.Microsecond, true},
		{"7ns", 7, true},
		{" 0.25s\t", 250 * time.Millisecond, true},
		{"2", 2 * time.Second, true},
		{"0.5", 500 * time.Millisecond, true},
		{"0s", 0, true},
		{"1777636805", 5 * time.Second, true}, // Unix time: rlNow is 1777636800
		{"1777636790", 0, true},               // in the past
		{"2026-05-01T12:00:10Z", 10 * time.Second, true},
		{"2026-05-01t12:00:10z", 10 * time.Second, true},
		{"2026-05-01 12:00:10Z", 10 * time.Second, true},
		{"2026-05-01T11:00:10-01:00", 10 * time.Second, true},
		{"2026-05-01T12:00:00.000000001Z", 1, true},
		{"2025-05-01T12:00:00Z", 0, true},
		{"99999999h", maxReset, true},
		{"", 0, false},
		{"s", 0, false},
		{"1x", 0, false},
		{"-1s", 0, false},
		{"1.s", time.Second, true}, // as time.ParseDuration
		{".5s", 500 * time.Millisecond, true},
		{"2026-13-01T12:00:00Z", 0, false},
		{"2026-05-01T12:00:00", 0, false},
		{"2026-05-01T12:00:00+0100", 0, false},
		{"2026-05-01T25:00:00Z", 0, false},
	}
	for _, c := range resets {
		var r RateLimits
		ok := r.Header([]byte("x-ratelimit-reset-tokens"), []byte(c.in), rlNow)
		if ok != c.ok || r.Tokens.Reset != c.want || (r.Tokens.Has == HasReset) != c.ok {
			t.Errorf("reset %q: ok %v reset %v has %b; want ok %v reset %v", c.in, ok, r.Tokens.Reset, r.Tokens.Has, c.ok, c.want)
		}
	}
	counts := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"40000", 40000, true}, {" 12 ", 12, true}, {"12.9", 12, true},
		{"99999999999999999999", maxRateCount, true},
		{"", 0, false}, {"-1", 0, false}, {"1e3", 0, false}, {"12.", 0, false}, {"abc", 0, false},
	}
	for _, c := range counts {
		var r RateLimits
		ok := r.Header([]byte("x-ratelimit-remaining-requests"), []byte(c.in), rlNow)
		if ok != c.ok || r.Requests.Remaining != c.want {
			t.Errorf("count %q: ok %v remaining %d; want ok %v %d", c.in, ok, r.Requests.Remaining, c.ok, c.want)
		}
	}
}

// TestRateLimitNames: names that look alike but are not rate-limit headers
// are ignored.
func TestRateLimitNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"x-ratelimit-limit-requestsx", "x-ratelimit-limit", "x-ratelimit-limit-", "x-ratelimit-used-requests",
		"x-ratelimit-limit-tokens-usage-based", "x-ratelimit-remaining-input-tokens",
		"anthropic-ratelimit-requests", "anthropic-ratelimit-requests-limitx", "anthropic-ratelimit-cache-tokens-limit",
		"anthropic-ratelimit-tokens_limit", "ratelimit-limit", "retry-after", "",
	} {
		var r RateLimits
		if r.Header([]byte(name), []byte("10"), rlNow) || r.Any() {
			t.Errorf("%q was taken as a rate-limit header: %+v", name, r)
		}
	}
	var r RateLimits
	if !r.Header([]byte("X-RateLimit-Remaining-Tokens"), []byte("7"), rlNow) || r.Tokens.Remaining != 7 {
		t.Errorf("mixed-case name not understood: %+v", r)
	}
}

func TestRateLimitsNoAlloc(t *testing.T) {
	names := [][]byte{
		[]byte("x-ratelimit-limit-tokens"), []byte("x-ratelimit-reset-tokens"),
		[]byte("anthropic-ratelimit-output-tokens-reset"), []byte("content-type"),
	}
	values := [][]byte{[]byte("40000"), []byte("6m0s"), []byte("2026-05-01T12:00:10.123456789+00:00"), []byte("application/json")}
	allocs := testing.AllocsPerRun(100, func() {
		var r RateLimits
		for i := range names {
			r.Header(names[i], values[i], rlNow)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per response", allocs)
	}
}

// FuzzRateLimitHeader: Header never panics, only sets the bits of the
// fields it reports, and never produces a negative or out-of-bound value.
func FuzzRateLimitHeader(f *testing.F) {
	for _, s := range []string{
		"x-ratelimit-reset-tokens\x006m0s", "x-ratelimit-remaining-requests\x0059",
		"anthropic-ratelimit-input-tokens-reset\x002026-05-01T12:00:01.5Z",
		"anthropic-ratelimit-output-tokens-limit\x00 10000 ", "x-ratelimit-reset-requests\x001h2m3.5s",
		"x-ratelimit-reset-requests\x001777636805",
	} {
		name, value, _ := strings.Cut(s, "\x00")
		f.Add([]byte(name), []byte(value))
	}
	f.Fuzz(func(t *testing.T, name, value []byte) {
		var r RateLimits
		ok := r.Header(name, value, rlNow)
		if ok != r.Any() {
			t.Fatalf("reported %v, fields %+v", ok, r)
		}
		for _, rl := range []RateLimit{r.Requests, r.Tokens, r.InputTokens, r.OutputTokens} {
			if rl.Limit < 0 || rl.Limit > maxRateCount || rl.Remaining < 0 || rl.Remaining > maxRateCount ||
				rl.Reset < 0 || rl.Reset > maxReset || rl.Has&^(HasLimit|HasRemaining|HasReset) != 0 {
				t.Fatalf("out of range: %+v", rl)
			}
		}
	})
}

func BenchmarkRateLimitHeaders(b *testing.B) {
	type kv struct{ k, v []byte }
	hs := []kv{
		{[]byte("content-type"), []byte("text/event-stream")},
		{[]byte("x-ratelimit-limit-requests"), []byte("60")},
		{[]byte("x-ratelimit-limit-tokens"), []byte("40000")},
		{[]byte("x-ratelimit-remaining-requests"), []byte("59")},
		{[]byte("x-ratelimit-remaining-tokens"), []byte("39000")},
		{[]byte("x-ratelimit-reset-requests"), []byte("1s")},
		{[]byte("x-ratelimit-reset-tokens"), []byte("1.5s")},
		{[]byte("x-request-id"), []byte("req_123")},
	}
	b.ReportAllocs()
	for b.Loop() {
		var r RateLimits
		for _, h := range hs {
			r.Header(h.k, h.v, rlNow)
		}
	}
}
