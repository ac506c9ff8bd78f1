package load

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestParseSDK(t *testing.T) {
	for _, s := range []SDK{SDKNone, SDKOpenAI, SDKAnthropic} {
		got, err := ParseSDK(s.String())
		if err != nil || got != s {
			t.Errorf("ParseSDK(%q) = %v, %v", s.String(), got, err)
		}
	}
	if _, err := ParseSDK("openai-node"); err == nil {
		t.Error("ParseSDK accepted openai-node")
	}
}

// TestRetrySchedule checks the SDKs' retry rules (sdk.go cites their
// source) one answer at a time, with the jitter's random source injected.
func TestRetrySchedule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	const retry = stopNeedsDecision
	ms := time.Millisecond
	type hdr struct{ shouldRetry, raMs, ra string }
	cases := []struct {
		name      string
		sdk       SDK
		n, max    int // attempt (retries_taken) and max_retries
		status    int
		h         hdr
		random    float64
		wait      time.Duration
		stop      string
		broken    bool
		wantRange [2]time.Duration // when wait is jittered: (lo, hi]
	}{
		// What is retried.
		{name: "ok", sdk: SDKOpenAI, status: 200, max: 2, stop: StopOK},
		{name: "no sdk", sdk: SDKNone, status: 503, max: 2, stop: StopNoRetries},
		{name: "max_retries 0", sdk: SDKOpenAI, status: 503, max: 0, stop: StopNoRetries},
		{name: "stream broke after 200", sdk: SDKOpenAI, status: 200, broken: true, max: 2, stop: StopStreamBroken},
		{name: "connection error", sdk: SDKOpenAI, status: 0, max: 2, random: 0, wait: 500 * ms, stop: retry},
		{name: "408", sdk: SDKOpenAI, status: 408, max: 2, wait: 500 * ms, stop: retry},
		{name: "409", sdk: SDKAnthropic, status: 409, max: 2, wait: 500 * ms, stop: retry},
		{name: "429", sdk: SDKOpenAI, status: 429, max: 2, wait: 500 * ms, stop: retry},
		{name: "500", sdk: SDKOpenAI, status: 500, max: 2, wait: 500 * ms, stop: retry},
		{name: "529", sdk: SDKAnthropic, status: 529, max: 2, wait: 500 * ms, stop: retry},
		{name: "400", sdk: SDKOpenAI, status: 400, max: 2, stop: StopNotRetryable},
		{name: "401", sdk: SDKAnthropic, status: 401, max: 2, stop: StopNotRetryable},
		{name: "413", sdk: SDKOpenAI, status: 413, max: 2, stop: StopNotRetryable},
		{name: "exhausted", sdk: SDKOpenAI, status: 503, n: 2, max: 2, stop: StopExhausted},
		{name: "not retryable on the last attempt", sdk: SDKOpenAI, status: 400, n: 2, max: 2, stop: StopNotRetryable},
		{name: "connection error on the last attempt", sdk: SDKOpenAI, status: 0, n: 2, max: 2, stop: StopExhausted},
		// x-should-retry overrides the status, compared as sent.
		{name: "should-retry true on 400", sdk: SDKOpenAI, status: 400, h: hdr{shouldRetry: "true"}, max: 2, wait: 500 * ms, stop: retry},
		{name: "should-retry false on 503", sdk: SDKOpenAI, status: 503, h: hdr{shouldRetry: "false"}, max: 2, stop: StopShouldRetry},
		{name: "should-retry false on 429", sdk: SDKAnthropic, status: 429, h: hdr{shouldRetry: "false"}, max: 2, stop: StopShouldRetry},
		{name: "should-retry True is not true", sdk: SDKOpenAI, status: 400, h: hdr{shouldRetry: "True"}, max: 2, stop: StopNotRetryable},
		{name: "should-retry true still bounded", sdk: SDKOpenAI, status: 400, h: hdr{shouldRetry: "true"}, n: 2, max: 2, stop: StopExhausted},
		// The server's delay.
		{name: "retry-after-ms", sdk: SDKOpenAI, status: 429, h: hdr{raMs: "1500", ra: "9"}, max: 2, wait: 1500 * ms, stop: retry},
		{name: "retry-after-ms fraction", sdk: SDKAnthropic, status: 503, h: hdr{raMs: "12.5"}, max: 2, wait: 12500 * time.Microsecond, stop: retry},
		{name: "retry-after-ms 0: backoff, retry-after unread", sdk: SDKOpenAI, status: 503, h: hdr{raMs: "0", ra: "9"}, max: 2, wait: 500 * ms, stop: retry},
		{name: "retry-after-ms garbage: retry-after", sdk: SDKOpenAI, status: 503, h: hdr{raMs: "soon", ra: "9"}, max: 2, wait: 9 * time.Second, stop: retry},
		{name: "retry-after seconds", sdk: SDKOpenAI, status: 429, h: hdr{ra: "7"}, max: 2, wait: 7 * time.Second, stop: retry},
		{name: "retry-after float", sdk: SDKAnthropic, status: 429, h: hdr{ra: " 2.5 "}, max: 2, wait: 2500 * ms, stop: retry},
		{name: "retry-after 0", sdk: SDKOpenAI, status: 429, h: hdr{ra: "0"}, max: 2, wait: 500 * ms, stop: retry},
		{name: "retry-after negative", sdk: SDKOpenAI, status: 429, h: hdr{ra: "-3"}, max: 2, wait: 500 * ms, stop: retry},
		{name: "retry-after nan", sdk: SDKOpenAI, status: 429, h: hdr{ra: "nan"}, max: 2, wait: 500 * ms, stop: retry},
		{name: "retry-after inf openai", sdk: SDKOpenAI, status: 429, h: hdr{ra: "inf"}, max: 2, wait: 500 * ms, stop: retry},
		{name: "retry-after inf anthropic", sdk: SDKAnthropic, status: 429, h: hdr{ra: "inf"}, max: 2, wait: 500 * ms, stop: retry},
		{name: "retry-after hex is no number", sdk: SDKOpenAI, status: 429, h: hdr{ra: "0x10"}, max: 2, wait: 500 * ms, stop: retry},
		{name: "retry-after date", sdk: SDKOpenAI, status: 503, h: hdr{ra: date(30 * time.Second)}, max: 2, wait: 30 * time.Second, stop: retry},
		{name: "retry-after date past", sdk: SDKOpenAI, status: 503, h: hdr{ra: date(-30 * time.Second)}, max: 2, wait: 500 * ms, stop: retry},
		{name: "retry-after garbage", sdk: SDKAnthropic, status: 503, h: hdr{ra: "later"}, max: 2, wait: 500 * ms, stop: retry},
		// The SDKs' bounds on it differ.
		{name: "openai honours 120 s", sdk: SDKOpenAI, status: 429, h: hdr{ra: "120"}, max: 2, wait: 120 * time.Second, stop: retry},
		{name: "openai refuses above 120 s", sdk: SDKOpenAI, status: 429, h: hdr{ra: "121"}, max: 2, stop: StopLongDelay},
		{name: "openai refuses a far date", sdk: SDKOpenAI, status: 429, h: hdr{ra: date(time.Hour)}, max: 2, stop: StopLongDelay},
		{name: "openai refusal before x-should-retry", sdk: SDKOpenAI, status: 429, h: hdr{shouldRetry: "true", raMs: "200000"}, max: 2, stop: StopLongDelay},
		{name: "openai 90 s", sdk: SDKOpenAI, status: 429, h: hdr{ra: "90"}, max: 2, wait: 90 * time.Second, stop: retry},
		{name: "anthropic honours 60 s", sdk: SDKAnthropic, status: 429, h: hdr{ra: "60"}, max: 2, wait: 60 * time.Second, stop: retry},
		{name: "anthropic backs off above 60 s", sdk: SDKAnthropic, status: 429, h: hdr{ra: "90"}, max: 2, wait: 500 * ms, stop: retry},
		{name: "anthropic backs off far above", sdk: SDKAnthropic, status: 429, h: hdr{ra: "3600"}, n: 1, max: 2, wait: time.Second, stop: retry},
		// The backoff: min(0.5 s * 2^n, 8 s) * (1 - 0.25 random).
		{name: "backoff n=1", sdk: SDKOpenAI, status: 503, n: 1, max: 10, wait: time.Second, stop: retry},
		{name: "backoff n=2", sdk: SDKOpenAI, status: 503, n: 2, max: 10, wait: 2 * time.Second, stop: retry},
		{name: "backoff n=3", sdk: SDKAnthropic, status: 503, n: 3, max: 10, wait: 4 * time.Second, stop: retry},
		{name: "backoff n=4 capped", sdk: SDKOpenAI, status: 503, n: 4, max: 10, wait: 8 * time.Second, stop: retry},
		{name: "backoff n=9 capped", sdk: SDKOpenAI, status: 503, n: 9, max: 10, wait: 8 * time.Second, stop: retry},
		{name: "jitter half", sdk: SDKOpenAI, status: 503, n: 1, max: 2, random: 0.5, wait: 875 * ms, stop: retry},
		{name: "jitter near 1", sdk: SDKOpenAI, status: 503, n: 0, max: 2, random: 0.999999, wantRange: [2]time.Duration{375 * ms, 376 * ms}, stop: retry},
	}
	for _, tc := range cases {
		a := answer{status: tc.status, afterHeaders: tc.broken, shouldRetry: tc.h.shouldRetry,
			retryAfterMs: tc.h.raMs, hasRetryAfterMs: tc.h.raMs != "", retryAfter: tc.h.ra, hasRetryAfter: tc.h.ra != ""}
		wait, stop := tc.sdk.decide(tc.n, tc.max, &a, func() float64 { return tc.random }, now)
		if stop != tc.stop {
			t.Errorf("%s: stop %q, want %q", tc.name, stop, tc.stop)
			continue
		}
		if tc.wantRange[1] > 0 {
			if wait <= tc.wantRange[0] || wait > tc.wantRange[1] {
				t.Errorf("%s: wait %v, want in (%v, %v]", tc.name, wait, tc.wantRange[0], tc.wantRange[1])
			}
		} else if d := wait - tc.wait; d < -time.Microsecond || d > time.Microsecond {
			t.Errorf("%s: wait %v, want %v", tc.name, wait, tc.wait)
		}
	}
}

// TestBackoffBounds draws the jitter many times: every wait lies in
// (0.75, 1] of min(0.5 s * 2^n, 8 s), and the draws spread over it.
func TestBackoffBounds(t *testing.T) {
	t.Parallel()
	rules := SDKOpenAI.rules()
	for n := range 8 {
		base := time.Duration(min(0.5*float64(int(1)<<n), 8) * float64(time.Second))
		lo, hi := base, time.Duration(0)
		for i := range 1000 {
			w := rules.retryTimeout(n, 0, false, func() float64 { return float64(i) / 1000 })
			if w <= base*3/4 || w > base {
				t.Fatalf("n=%d: wait %v outside (%v, %v]", n, w, base*3/4, base)
			}
			lo, hi = min(lo, w), max(hi, w)
		}
		if hi != base || lo > base*3/4+base/500 {
			t.Errorf("n=%d: waits span [%v, %v] of (%v, %v]", n, lo, hi, base*3/4, base)
		}
	}
}

// attemptLog is what the fake server saw of each attempt, in order.
type attemptLog struct {
	mu   sync.Mutex
	seen []http.Header
}

func (l *attemptLog) add(ctx *fasthttp.RequestCtx) int {
	h := http.Header{}
	for k, v := range ctx.Request.Header.All() {
		h.Add(string(k), string(v))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, h)
	return len(l.seen) - 1
}

// TestSDKHeaders runs one client whose every call is refused twice, then
// answered: the server checks each attempt's headers as it arrives.
func TestSDKHeaders(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                      string
		sdk                       SDK
		stream                    bool
		timeout                   time.Duration
		readTimeout, callTimeout  string // "" absent
		retries                   int    // refusals before the answer
		wantAttempts, wantRetries int
	}{
		{name: "openai", sdk: SDKOpenAI, stream: true, readTimeout: "600", retries: 2, wantAttempts: 3},
		{name: "openai timeout 30s", sdk: SDKOpenAI, stream: true, timeout: 30 * time.Second, readTimeout: "30", retries: 2, wantAttempts: 3},
		{name: "openai no timeout", sdk: SDKOpenAI, stream: false, timeout: -1, retries: 1, wantAttempts: 2},
		{name: "anthropic stream", sdk: SDKAnthropic, stream: true, readTimeout: "600", callTimeout: "NOT_GIVEN", retries: 2, wantAttempts: 3},
		{name: "anthropic whole", sdk: SDKAnthropic, stream: false, readTimeout: "600", callTimeout: "600", retries: 2, wantAttempts: 3},
		{name: "anthropic whole 2.5s", sdk: SDKAnthropic, stream: false, timeout: 2500 * time.Millisecond, readTimeout: "2.5", callTimeout: "NOT_GIVEN", retries: 1, wantAttempts: 2},
		{name: "none", sdk: SDKNone, stream: true, retries: 1, wantAttempts: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var log attemptLog
			var mu sync.Mutex
			next := 0 // the x-stainless-retry-count the next attempt must carry
			base := serve(t, func(ctx *fasthttp.RequestCtx) {
				log.add(ctx)
				h := &ctx.Request.Header
				mu.Lock()
				want := next
				refuse := tc.sdk == SDKNone && next == 0 || next < tc.retries
				next++
				if !refuse || tc.sdk == SDKNone {
					next = 0
				}
				mu.Unlock()
				check := func(name, expect string) {
					got, ok := string(h.Peek(name)), h.Peek(name) != nil
					if expect == "" && ok {
						t.Errorf("attempt %d: %s: %q sent", want, name, got)
					}
					if expect != "" && got != expect {
						t.Errorf("attempt %d: %s: %q, want %q", want, name, got, expect)
					}
				}
				if tc.sdk == SDKNone {
					check("x-stainless-retry-count", "")
				} else {
					check("x-stainless-retry-count", strconv.Itoa(want))
				}
				check("x-stainless-read-timeout", tc.readTimeout)
				check("x-stainless-timeout", tc.callTimeout)
				if refuse {
					ctx.Response.Header.Set("X-Sluice-Rejected", "queue_full")
					ctx.Response.Header.Set("Retry-After", "1")
					ctx.Response.Header.Set("Retry-After-Ms", "5")
					ctx.SetStatusCode(503)
					return
				}
				if tc.stream {
					okStream(ctx)
				} else {
					ctx.SetBodyString(`{"choices":[{"message":{"content":"ab"}}],"usage":{"completion_tokens":2}}`)
				}
			})
			res, err := Run(context.Background(), Config{
				URL: base + "/v1/chat/completions", Stream: tc.stream, SDK: tc.sdk, Timeout: tc.timeout,
				Clients: 1, Duration: 400 * time.Millisecond, Prompt: Dist{Mean: 10}, Output: Dist{Mean: 2},
			})
			if err != nil {
				t.Fatal(err)
			}
			s := res.Summary()
			c := s.Calls
			if c.Calls < 2 || c.Attempts[tc.wantAttempts] != c.Calls {
				t.Fatalf("calls by attempts %v, want all %d of %d with %d", c.Attempts, c.Calls, c.Calls, tc.wantAttempts)
			}
			wantOK := c.Calls
			if tc.sdk == SDKNone {
				wantOK = 0 // each call is its one refused attempt
				if c.Stops[StopNoRetries] != c.Calls {
					t.Errorf("stops %v", c.Stops)
				}
			}
			if c.OK != wantOK || c.Failed != c.Calls-wantOK {
				t.Errorf("calls %+v", c)
			}
			// Every call has one first attempt; a call cut at the end may
			// have fewer than the others.
			first := 0
			for _, r := range res.Records {
				if r.Retry == 0 {
					first++
				}
				if r.Retry >= tc.wantAttempts {
					t.Errorf("attempt %d recorded", r.Retry)
				}
			}
			if first != len(res.Calls) || len(res.Calls) != c.Calls+c.Cut {
				t.Errorf("%d first attempts, %d calls (%d cut)", first, len(res.Calls), c.Cut)
			}
			if tc.sdk != SDKNone {
				// Each retry waited retry-after-ms, 5 ms.
				if min := time.Duration(c.Calls*(tc.wantAttempts-1)) * 5 * time.Millisecond; c.Backoff < min || c.Total.P50 < 5*time.Millisecond {
					t.Errorf("backoff %v (want at least %v), call total p50 %v", c.Backoff, min, c.Total.P50)
				}
			}
			for _, r := range res.Records {
				if r.Outcome == RejectedSluice && (r.Reason != "queue_full" || r.RetryAfter != 5*time.Millisecond) {
					t.Errorf("refusal recorded as %q retry after %v", r.Reason, r.RetryAfter)
				}
			}
		})
	}
}

// TestSDKStops drives whole calls through the ways an SDK stops and checks
// the calls' summary.
func TestSDKStops(t *testing.T) {
	t.Parallel()
	base := serve(t, func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Request.Header.Peek("x-answer")) {
		case "always503":
			ctx.Response.Header.Set("retry-after-ms", "2")
			ctx.SetStatusCode(503)
		case "400":
			ctx.SetStatusCode(400)
		case "final429":
			ctx.Response.Header.Set("X-Sluice-Rejected", "over_quota")
			ctx.Response.Header.Set("X-Should-Retry", "false")
			ctx.SetStatusCode(429)
		case "long":
			ctx.Response.Header.Set("Retry-After", "600")
			ctx.SetStatusCode(429)
		case "truncated":
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyString(`data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n")
		}
	})
	for _, tc := range []struct {
		answer   string
		attempts int
		stop     string
		last     Outcome
	}{
		{"always503", 3, StopExhausted, RejectedUpstream},
		{"400", 1, StopNotRetryable, Failed},
		{"final429", 1, StopShouldRetry, RejectedSluice},
		{"long", 1, StopLongDelay, RejectedUpstream},
		{"truncated", 1, StopStreamBroken, Failed},
	} {
		t.Run(tc.answer, func(t *testing.T) {
			t.Parallel()
			res, err := Run(context.Background(), Config{
				URL: base + "/v1/chat/completions", Stream: true, SDK: SDKOpenAI, Headers: map[string]string{"x-answer": tc.answer},
				Clients: 1, Duration: 300 * time.Millisecond, Prompt: Dist{Mean: 10}, Output: Dist{Mean: 2},
			})
			if err != nil {
				t.Fatal(err)
			}
			c := res.Summary().Calls
			if c.Calls == 0 || c.OK != 0 || c.Failed != c.Calls || c.Attempts[tc.attempts] != c.Calls ||
				c.Stops[tc.stop] != c.Calls || c.FailedBy[tc.last.String()] != c.Calls {
				t.Fatalf("calls %+v", c)
			}
		})
	}
}

// rawServer answers every connection with reply (then closes it), or
// closes it at once when reply is "".
func rawServer(t *testing.T, reply string) (string, *sync.WaitGroup) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var accepted sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer accepted.Done()
				defer conn.Close()
				if reply == "" {
					return
				}
				if req, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
					_, _ = io.Copy(io.Discard, req.Body)
				}
				_, _ = conn.Write([]byte(reply))
			}()
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait(); accepted.Wait() })
	return "http://" + ln.Addr().String(), &accepted
}

// TestSDKConnectionErrors: no answer, and a whole answer cut short, are
// connection errors, which the SDKs retry after their backoff.
func TestSDKConnectionErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, reply string }{
		{"closed", ""},
		{"body cut short", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"choices\":"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, _ := rawServer(t, tc.reply)
			res, err := Run(context.Background(), Config{
				URL: base + "/v1/chat/completions", Stream: false, SDK: SDKAnthropic, MaxRetries: 1,
				Clients: 1, Duration: 900 * time.Millisecond, Prompt: Dist{Mean: 10}, Output: Dist{Mean: 2},
			})
			if err != nil {
				t.Fatal(err)
			}
			c := res.Summary().Calls
			// One call: two attempts 0.375..0.5 s apart, then perhaps a
			// second call cut in its backoff.
			if c.Calls < 1 || c.Attempts[2] != c.Calls || c.Stops[StopExhausted] != c.Calls || c.Backoff < 375*time.Millisecond {
				t.Fatalf("calls %+v", c)
			}
			for _, r := range res.Records {
				if r.Outcome != Failed && r.Outcome != Cut || r.Status != 0 {
					t.Fatalf("attempt %+v", r)
				}
			}
		})
	}
}

// TestSDKTimeout: a read that takes longer than Timeout ends the attempt
// as "timeout", which is retried.
func TestSDKTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	base := serve(t, func(ctx *fasthttp.RequestCtx) {
		select {
		case <-release:
		case <-time.After(2 * time.Second):
		}
		okStream(ctx)
	})
	defer close(release)
	res, err := Run(context.Background(), Config{
		URL: base + "/v1/chat/completions", Stream: true, SDK: SDKOpenAI, MaxRetries: 1, Timeout: 50 * time.Millisecond,
		Clients: 1, Duration: 1200 * time.Millisecond, Prompt: Dist{Mean: 10}, Output: Dist{Mean: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Summary().Calls
	if c.Calls < 1 || c.Attempts[2] != c.Calls || c.Stops[StopExhausted] != c.Calls {
		t.Fatalf("calls %+v", c)
	}
	for _, r := range res.Records {
		if r.Outcome != Cut && (r.Reason != "timeout" || r.Total < 50*time.Millisecond || r.Total > time.Second) {
			t.Fatalf("attempt %+v", r)
		}
	}
}
