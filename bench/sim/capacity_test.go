package sim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestCapacityRespected sends 3C concurrent requests with overload
// rejection off: at most C run at once, the rest queue, all complete, and
// the queued ones wait for whole rounds.
func TestCapacityRespected(t *testing.T) {
	const c = 4
	cfg := fast()
	cfg.Schedule = []Step{{Capacity: c}}
	cfg.OverloadFactor = -1
	cfg.TimeScale = 0.1
	h := start(t, cfg, false)

	var wg sync.WaitGroup
	durs := make([]time.Duration, 3*c)
	t0 := time.Now()
	for i := range 3 * c {
		stream := i%2 == 0 // mix stream and non-stream
		wg.Go(func() {
			body := `{"model":"m","stream":` + strconv.FormatBool(stream) + `}`
			// 10 tokens at 20 ms model ITL + 50 ms TTFT = 230 ms model = 23 ms real.
			resp, err := h.post(context.Background(), "/v1/chat/completions", body,
				HeaderOutputTokens, "10", HeaderTTFT, "50ms")
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
			durs[i] = time.Since(t0)
		})
	}
	wg.Wait()
	st := h.s.Stats()
	if st.MaxRunning != c {
		t.Errorf("MaxRunning %d, want exactly %d", st.MaxRunning, c)
	}
	if st.Completed != 3*c || st.MaxInFlight > 3*c || st.MaxInFlight <= c {
		t.Errorf("stats %+v", st)
	}
	// Three rounds of ~23 ms: the slowest finished no earlier than that.
	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	if durs[len(durs)-1] < 3*23*time.Millisecond*9/10 {
		t.Errorf("slowest request took %v, want >= 3 rounds", durs[len(durs)-1])
	}
}

// TestOverload: with C=2 and factor 1.5, the third concurrent request is
// queued (2+0 < 3, 2+1 >= 3 after) and the fourth rejected: 429 in the
// OpenAI dialects, 529 for Anthropic, with retry-after.
func TestOverload(t *testing.T) {
	cfg := fast()
	cfg.Schedule = []Step{{Capacity: 2}}
	cfg.TimeScale = 1
	cfg.RetryAfter = 1500 * time.Millisecond
	h := start(t, cfg, false)

	var holds []*http.Response
	for range 3 {
		// Streams send headers at once, then sit in prefill (or the queue).
		resp := h.mustPost("/v1/chat/completions", `{"stream":true}`, HeaderTTFT, "1h")
		holds = append(holds, resp)
	}
	h.waitStats("2 running, 1 queued", func(st Stats) bool { return st.Running == 2 && st.Queued == 1 })

	for _, tc := range []struct {
		path   string
		status int
		check  func(m map[string]any) bool
	}{
		{"/v1/chat/completions", 429, func(m map[string]any) bool {
			return path(m, "error", "code") == "rate_limit_exceeded" && path(m, "error", "type") == "requests"
		}},
		{"/v1/responses", 429, func(m map[string]any) bool { return path(m, "error", "code") == "rate_limit_exceeded" }},
		{"/v1/messages", 529, func(m map[string]any) bool {
			return path(m, "type") == "error" && path(m, "error", "type") == "overloaded_error" && path(m, "error", "message") == "Overloaded"
		}},
	} {
		resp := h.mustPost(tc.path, `{"stream":true,"max_tokens":5}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != "2" || resp.Header.Get("Retry-After-Ms") != "1500" {
			t.Errorf("%s: status %d retry-after %q retry-after-ms %q", tc.path, resp.StatusCode,
				resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"))
		}
		m := decode(t, sseEvent{data: string(b)})
		if !tc.check(m) {
			t.Errorf("%s: body %s", tc.path, b)
		}
	}
	st := h.s.Stats()
	if st.Rejected429 != 2 || st.Rejected529 != 1 || st.Overloaded != 3 || st.MaxInFlight != 3 || st.MaxRunning != 2 {
		t.Errorf("stats %+v", st)
	}
	// Close aborts the three held requests.
	_ = h.s.Close()
	for _, r := range holds {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	if st := h.s.Stats(); st.Aborted != 3 || st.Open != 0 || st.Running != 0 || st.Queued != 0 {
		t.Errorf("after Close: %+v", st)
	}
}

// TestQueueWaitAddsToTTFT: with C=1 the second request's first token comes
// after the first request's whole stream.
func TestQueueWaitAddsToTTFT(t *testing.T) {
	cfg := fast()
	cfg.Schedule = []Step{{Capacity: 1}}
	cfg.TimeScale = 1
	h := start(t, cfg, false)

	first := make(chan time.Time, 2)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range 2 {
		wg.Go(func() {
			if i == 1 {
				h.waitStats("first running", func(st Stats) bool { return st.Running == 1 })
			}
			resp := h.mustPost("/v1/messages", `{"stream":true,"max_tokens":50}`,
				HeaderTTFT, "50ms", HeaderITL, "10ms", HeaderOutputTokens, "5")
			defer resp.Body.Close()
			evs, err := readSSE(resp.Body)
			if err != nil {
				t.Error(err)
				return
			}
			for _, ev := range evs {
				if ev.name == "content_block_delta" {
					first <- ev.at
					return
				}
			}
		})
	}
	wg.Wait()
	a, b := (<-first).Sub(t0), (<-first).Sub(t0)
	if a > b {
		a, b = b, a
	}
	// First: ~50 ms. Second: ~50+40 ms queued + 50 ms own TTFT.
	if a < 45*time.Millisecond || b < 130*time.Millisecond {
		t.Errorf("first tokens at %v and %v; want >= 45ms and >= 130ms", a, b)
	}
	if st := h.s.Stats(); st.MaxRunning != 1 || st.MaxInFlight != 2 || st.Completed != 2 || st.FirstTokens != 2 {
		t.Errorf("stats %+v", st)
	}
	// The provider's own TTFT: its queue and prefill, within what the
	// clients saw (who also count the trip to and from the provider).
	ttft := h.s.TTFT()
	us := func(d time.Duration) int64 { return d.Microseconds() }
	if n := ttft.TotalCount(); n != 2 {
		t.Fatalf("TTFT holds %d streams, want 2", n)
	}
	if lo, hi := ttft.Min(), ttft.Max(); lo < us(45*time.Millisecond) || hi < us(130*time.Millisecond) ||
		!ttft.ValuesAreEquivalent(min(lo, us(a)), lo) || !ttft.ValuesAreEquivalent(min(hi, us(b)), hi) {
		t.Errorf("provider TTFTs %v and %v; want >= 45ms and >= 130ms, at most the client's %v and %v",
			time.Duration(lo)*time.Microsecond, time.Duration(hi)*time.Microsecond, a, b)
	}
	// A non-stream answer is sent whole: no first token to time. The copy
	// taken above does not change.
	resp := h.mustPost("/v1/messages", `{"max_tokens":50}`, HeaderTTFT, "1ms", HeaderOutputTokens, "1")
	resp.Body.Close()
	if st := h.s.Stats(); st.FirstTokens != 2 || h.s.TTFT().TotalCount() != 2 || ttft.TotalCount() != 2 {
		t.Errorf("non-stream request counted as a first token: %+v", st)
	}
}

// TestEventSpacing: token events arrive about ITL apart and the first after
// about TTFT (coarse bounds; real time).
func TestEventSpacing(t *testing.T) {
	cfg := fast()
	cfg.TimeScale = 1
	cfg.ITL = 20 * time.Millisecond
	h := start(t, cfg, false)
	t0 := time.Now()
	resp := h.mustPost("/v1/chat/completions", `{"stream":true}`, HeaderOutputTokens, "11", HeaderTTFT, "60ms")
	defer resp.Body.Close()
	evs, err := readSSE(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var toks []time.Time
	for _, ev := range evs {
		if c := path(decode0(ev), "choices", 0, "delta", "content"); c == tokenText {
			toks = append(toks, ev.at)
		}
	}
	if len(toks) != 11 {
		t.Fatalf("%d tokens", len(toks))
	}
	if ttft := toks[0].Sub(t0); ttft < 55*time.Millisecond || ttft > 2*time.Second {
		t.Errorf("TTFT %v, want ~60ms", ttft)
	}
	span := toks[10].Sub(toks[0])
	if span < 180*time.Millisecond || span > 3*time.Second {
		t.Errorf("10 gaps took %v, want ~200ms", span)
	}
	var gaps []time.Duration
	for i := 1; i < len(toks); i++ {
		gaps = append(gaps, toks[i].Sub(toks[i-1]))
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i] < gaps[j] })
	if med := gaps[len(gaps)/2]; med < 10*time.Millisecond || med > 200*time.Millisecond {
		t.Errorf("median gap %v, want ~20ms (gaps %v)", med, gaps)
	}
}

// decode0 decodes an OpenAI chunk, returning nil for [DONE].
func decode0(ev sseEvent) map[string]any {
	var m map[string]any
	_ = json.Unmarshal([]byte(ev.data), &m)
	return m
}

// TestLoadSlowsTokens: ITL grows with running/C.
func TestLoadSlowsTokens(t *testing.T) {
	cfg := fast()
	s := New(cfg) // ITLLoad off in fast(); set it here
	defer s.Close()
	s.Update(func(c *Config) { c.ITLLoad = 1 })
	r := &request{s: s, cfg: s.cfg.Load(), itl: -1, ttft: -1}
	idle := r.tokenDelay()
	s.runningA.Store(int64(s.Capacity())) // fully loaded
	full := r.tokenDelay()
	if idle != s.cfg.Load().scale(DefaultITL) || full != 2*idle {
		t.Errorf("ITL idle %v full %v, want %v and double", idle, full, s.cfg.Load().scale(DefaultITL))
	}
	s.runningA.Store(0)
}
