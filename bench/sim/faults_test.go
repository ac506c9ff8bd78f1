package sim

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDisconnectWhileSilentFreesSlot: C=1; A holds the slot in a long
// prefill (nothing written), B waits in the queue. A's client leaves: the
// socket peek notices, A's slot goes to B, which completes.
func TestDisconnectWhileSilentFreesSlot(t *testing.T) {
	cfg := fast()
	cfg.Schedule = []Step{{Capacity: 1}}
	h := start(t, cfg, true)

	ctxA, cancelA := context.WithCancel(context.Background())
	respA, err := h.post(ctxA, "/v1/chat/completions", `{"stream":true}`, HeaderTTFT, "1000h")
	if err != nil {
		t.Fatal(err)
	}
	h.waitStats("A running", func(st Stats) bool { return st.Running == 1 })

	doneB := make(chan error, 1)
	go func() {
		resp, err := h.post(context.Background(), "/v1/chat/completions", `{}`, HeaderOutputTokens, "3")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				err = errors.New(resp.Status)
			}
		}
		doneB <- err
	}()
	h.waitStats("B queued", func(st Stats) bool { return st.Queued == 1 })
	cancelA()
	respA.Body.Close()
	select {
	case err := <-doneB:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("B never ran after A left")
	}
	st := h.waitStats("A counted", func(st Stats) bool { return st.Disconnects == 1 })
	if st.Completed != 1 || st.MaxRunning != 1 || st.Running != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestDisconnectWhileQueued: a queued request whose client leaves is
// removed from the queue (over TCP, by peeking).
func TestDisconnectWhileQueued(t *testing.T) {
	cfg := fast()
	cfg.Schedule = []Step{{Capacity: 0}}
	cfg.OverloadFactor = -1 // C=0 would otherwise reject everything
	h := start(t, cfg, true)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := h.post(ctx, "/v1/messages", `{"stream":true,"max_tokens":9}`)
	if err != nil {
		t.Fatal(err)
	}
	h.waitStats("queued", func(st Stats) bool { return st.Queued == 1 })
	cancel()
	resp.Body.Close()
	st := h.waitStats("disconnect", func(st Stats) bool { return st.Disconnects == 1 })
	if st.Queued != 0 || st.Open != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestDisconnectMidStream: a client that stops reading mid-stream is
// noticed by the next failed write (in-memory listener, no peeking).
func TestDisconnectMidStream(t *testing.T) {
	cfg := fast()
	cfg.Schedule = []Step{{Capacity: 1}}
	h := start(t, cfg, false)
	resp := h.mustPost("/v1/chat/completions", `{"stream":true}`, HeaderOutputTokens, "100000", HeaderITL, "10ms")
	br := bufio.NewReader(resp.Body)
	for range 3 {
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	resp.Body.Close()
	st := h.waitStats("disconnect", func(st Stats) bool { return st.Disconnects == 1 })
	if st.Running != 0 || st.Open != 0 || st.OutputTokens == 0 || st.OutputTokens >= 100000 {
		t.Errorf("stats %+v", st)
	}
	// The slot is free again.
	resp = h.mustPost("/v1/chat/completions", `{}`, HeaderOutputTokens, "2")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
}

// TestResetMidStream: the connection drops after K events, without the
// terminal event or the end of the chunked body.
func TestResetMidStream(t *testing.T) {
	h := start(t, fast(), false)
	for _, tc := range []struct {
		path, body, tokens, after string
		events                    int
	}{
		{"/v1/chat/completions", `{"stream":true}`, "50", "4", 4},
		{"/v1/messages", `{"stream":true,"max_tokens":99}`, "50", "", DefaultResetAfter},
		// Fewer events than K: role + 2 tokens + finish + [DONE], then the drop.
		{"/v1/chat/completions", `{"stream":true}`, "2", "1000", 5},
	} {
		hdr := []string{HeaderFail, "reset-mid-stream", HeaderOutputTokens, tc.tokens}
		if tc.after != "" {
			hdr = append(hdr, HeaderFailAfter, tc.after)
		}
		resp := h.mustPost(tc.path, tc.body, hdr...)
		evs, err := readSSE(resp.Body)
		resp.Body.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s after %q: read error %v, want unexpected EOF", tc.path, tc.after, err)
		}
		if len(evs) != tc.events {
			t.Errorf("%s after %q: %d events, want %d", tc.path, tc.after, len(evs), tc.events)
		}
	}
	// Non-stream: dropped without a response.
	_, err := h.post(context.Background(), "/v1/chat/completions", `{}`, HeaderFail, "reset-mid-stream")
	if err == nil {
		t.Error("non-stream reset: got a response")
	}
	st := h.waitStats("4 resets", func(st Stats) bool { return st.Resets == 4 && st.Open == 0 })
	if st.Errors != 4 || st.Running != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestStatusFaults(t *testing.T) {
	h := start(t, fast(), false)
	for _, tc := range []struct {
		path, fail string
		status     int
		typ        string
	}{
		{"/v1/chat/completions", "500", 500, "server_error"},
		{"/v1/messages", "500", 500, "api_error"},
		{"/v1/chat/completions", "503", 503, "server_error"},
		{"/v1/chat/completions", "429", 429, "requests"},
		{"/v1/messages", "529", 529, "overloaded_error"},
	} {
		resp := h.mustPost(tc.path, `{"stream":true,"max_tokens":9}`, HeaderFail, tc.fail)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := decode(t, sseEvent{data: string(b)})
		if resp.StatusCode != tc.status || path(m, "error", "type") != tc.typ {
			t.Errorf("%s %s: %d %s", tc.path, tc.fail, resp.StatusCode, b)
		}
	}
	st := h.s.Stats()
	if st.Errors != 3 || st.Rejected429 != 1 || st.Rejected529 != 1 || st.MaxRunning != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestGlobalFault: Config.Fault applies to requests without a header, at
// its rate, deterministically for a given seed.
func TestGlobalFault(t *testing.T) {
	cfg := fast()
	cfg.Fault = Fault{Kind: Fault503, Rate: 0.5}
	h := start(t, cfg, false)
	var codes []string
	for range 20 {
		resp := h.mustPost("/v1/chat/completions", `{}`, HeaderOutputTokens, "1")
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.Status[:3])
	}
	st := h.s.Stats()
	if st.Errors == 0 || st.Completed == 0 || st.Errors+st.Completed != 20 {
		t.Errorf("with rate 0.5: %d errors %d completed", st.Errors, st.Completed)
	}
	// Same seed, same sequence.
	h2 := start(t, cfg, false)
	for i := range 20 {
		resp := h2.mustPost("/v1/chat/completions", `{}`, HeaderOutputTokens, "1")
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Status[:3] != codes[i] {
			t.Fatalf("request %d: %s, first run %s", i, resp.Status[:3], codes[i])
		}
	}
	// A header wins over the global fault; Update turns it off.
	h.s.Update(func(c *Config) { c.Fault = Fault{} })
	resp := h.mustPost("/v1/chat/completions", `{}`, HeaderOutputTokens, "1")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after Update: %d", resp.StatusCode)
	}
}

// TestHang: nothing is sent; the client's timeout ends it (seen by peeking
// over TCP); Close ends another one.
func TestHang(t *testing.T) {
	h := start(t, fast(), true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err := h.post(ctx, "/v1/chat/completions", `{"stream":true}`, HeaderFail, "hang")
	if err == nil || time.Since(t0) < 90*time.Millisecond {
		t.Fatalf("hang: err %v after %v", err, time.Since(t0))
	}
	// The hang is counted before the request is finished (two updates):
	// wait for both.
	st := h.waitStats("hang ended", func(st Stats) bool { return st.Hangs == 1 && st.Open == 0 })
	if st.Errors != 1 || st.Open != 0 || st.MaxRunning != 0 {
		t.Errorf("stats %+v", st)
	}

	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := h.post(context.Background(), "/v1/messages", `{}`, HeaderFail, "hang")
		if err == nil {
			t.Error("hang: got a response")
		}
	})
	h.waitStats("second hang", func(st Stats) bool { return st.Open == 1 })
	_ = h.s.Close()
	wg.Wait()
	if st := h.s.Stats(); st.Aborted != 1 || st.Hangs != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestSilentHeaders: headers come with the first token instead of at once.
func TestSilentHeaders(t *testing.T) {
	cfg := fast()
	cfg.TimeScale = 1
	h := start(t, cfg, false)
	for _, silent := range []bool{false, true} {
		hdr := []string{HeaderTTFT, "400ms", HeaderOutputTokens, "2", HeaderITL, "1ms"}
		if silent {
			hdr = append(hdr, HeaderSilentHeaders, "1")
		}
		t0 := time.Now()
		resp := h.mustPost("/v1/messages", `{"stream":true,"max_tokens":9}`, hdr...)
		headers := time.Since(t0)
		evs, err := readSSE(resp.Body)
		resp.Body.Close()
		if err != nil || len(evs) != 8 || evs[0].name != "message_start" {
			t.Fatalf("silent=%v: %d events, err %v", silent, len(evs), err)
		}
		if silent && headers < 390*time.Millisecond {
			t.Errorf("silent headers after %v, want >= TTFT 400ms", headers)
		}
		if !silent && headers > 300*time.Millisecond {
			t.Errorf("headers after %v, want at once", headers)
		}
	}
}

// TestRateLimit uses a frozen clock, so the bucket never refills.
func TestRateLimit(t *testing.T) {
	cfg := fast()
	now := time.Unix(1_700_000_000, 0)
	cfg.Clock = func() time.Time { return now }
	cfg.RateLimitRPS = 2
	h := start(t, cfg, false)
	var statuses []int
	for _, p := range []string{"/v1/chat/completions", "/v1/chat/completions", "/v1/chat/completions", "/v1/messages"} {
		resp := h.mustPost(p, `{"max_tokens":5}`, HeaderOutputTokens, "1")
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		if resp.StatusCode == 429 {
			if resp.Header.Get("Retry-After") != "1" {
				t.Errorf("retry-after %q", resp.Header.Get("Retry-After"))
			}
			if !strings.Contains(string(b), "rate_limit") {
				t.Errorf("body %s", b)
			}
		}
	}
	if want := []int{200, 200, 429, 429}; !equal(statuses, want) {
		t.Errorf("statuses %v, want %v", statuses, want)
	}
	if st := h.s.Stats(); st.RateLimited != 2 || st.Rejected429 != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestQuotaExhausted(t *testing.T) {
	cfg := fast()
	cfg.QuotaExhausted = true
	h := start(t, cfg, false)
	resp := h.mustPost("/v1/chat/completions", `{}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := decode(t, sseEvent{data: string(b)})
	if resp.StatusCode != 429 || path(m, "error", "code") != "insufficient_quota" || resp.Header.Get("Retry-After") != "" {
		t.Errorf("openai: %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	resp = h.mustPost("/v1/messages", `{"max_tokens":1}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "credit balance") {
		t.Errorf("anthropic: %d %s", resp.StatusCode, b)
	}
	if st := h.s.Stats(); st.QuotaRejected != 2 || st.Rejected429 != 1 || st.Errors != 1 {
		t.Errorf("stats %+v", st)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
