package sim

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// delays returns a request's time to first token and inter-token latency
// (real time) with running streams in the provider, read as a stream
// would read them.
func delays(s *Server, running int) (ttft, itl time.Duration) {
	s.runningA.Store(int64(running))
	defer s.runningA.Store(0)
	r := &request{s: s, cfg: s.cfg.Load(), itl: -1, ttft: -1, ttftJitter: 1}
	return r.firstTokenDelay(), r.tokenDelay()
}

// TestKneeLatencyInProportion: up to the knee the provider answers at its
// unloaded speed; beyond it time to first token and inter-token latency
// grow in proportion to the load (twice the knee: twice the latency),
// whatever SoftTTFT and ITLLoad say, which belong to the queueing shape.
func TestKneeLatencyInProportion(t *testing.T) {
	t.Parallel()
	cfg := fast()
	cfg.Shape = ShapeKnee
	cfg.Schedule = []Step{{Capacity: 300}}
	cfg.PrefillRate = -1
	cfg.SoftTTFT, cfg.ITLLoad = 3, 3
	s := New(cfg)
	defer s.Close()
	ttft0, itl0 := delays(s, 0)
	c := s.cfg.Load()
	if ttft0 != c.scale(DefaultBaseTTFT) || itl0 != c.scale(DefaultITL) {
		t.Fatalf("unloaded TTFT %v ITL %v, want %v and %v", ttft0, itl0, c.scale(DefaultBaseTTFT), c.scale(DefaultITL))
	}
	for _, tc := range []struct {
		running int
		factor  float64
	}{{1, 1}, {150, 1}, {300, 1}, {450, 1.5}, {600, 2}, {1200, 4}} {
		ttft, itl := delays(s, tc.running)
		want := func(d time.Duration) time.Duration { return time.Duration(float64(d) * tc.factor) }
		if ttft != want(ttft0) || itl != want(itl0) {
			t.Errorf("%d running: TTFT %v ITL %v, want %v and %v (x%g)", tc.running, ttft, itl, want(ttft0), want(itl0), tc.factor)
		}
	}
}

// TestNoKneeLatencyRisesGently: without a knee latency rises by Rise at C
// streams and on in proportion (by half at 1,000 of 1,000 with the
// default), so completions per second (running / latency) keep rising
// with the load.
func TestNoKneeLatencyRisesGently(t *testing.T) {
	t.Parallel()
	cfg := fast()
	cfg.Shape = ShapeNoKnee
	cfg.Schedule = []Step{{Capacity: 1000}}
	cfg.PrefillRate = -1
	s := New(cfg)
	defer s.Close()
	ttft0, itl0 := delays(s, 0)
	prevRate := 0.0
	for _, tc := range []struct {
		running int
		factor  float64
	}{{100, 1.05}, {500, 1.25}, {1000, 1.5}, {2000, 2}, {4000, 3}} {
		ttft, itl := delays(s, tc.running)
		want := func(d time.Duration) time.Duration { return time.Duration(float64(d) * tc.factor) }
		if ttft != want(ttft0) || itl != want(itl0) {
			t.Errorf("%d running: TTFT %v ITL %v, want %v and %v (x%g)", tc.running, ttft, itl, want(ttft0), want(itl0), tc.factor)
		}
		rate := float64(tc.running) / float64(itl)
		if rate <= prevRate {
			t.Errorf("%d running: tokens per unit time %g did not rise from %g", tc.running, rate, prevRate)
		}
		prevRate = rate
	}
	s.Update(func(c *Config) { c.Rise = -1 })
	if ttft, itl := delays(s, 4000); ttft != ttft0 || itl != itl0 {
		t.Errorf("Rise off: TTFT %v ITL %v at 4,000 running, want the unloaded %v and %v", ttft, itl, ttft0, itl0)
	}
}

// hold opens n streams that stay in prefill until the server closes, and
// returns their responses.
func (h *harness) hold(n int, path string) []*http.Response {
	h.t.Helper()
	var rs []*http.Response
	for range n {
		rs = append(rs, h.mustPost(path, `{"stream":true}`, HeaderTTFT, "1h"))
	}
	return rs
}

// drain reads and closes responses.
func drain(rs []*http.Response) {
	for _, r := range rs {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}

// TestKneeRunsAllRefusesBeyondOverload: the knee shape queues nothing: up
// to OverloadFactor x C requests all run at once, and the next is refused
// as overloaded (429 in the OpenAI dialects, 529 in Anthropic's) with
// retry-after.
func TestKneeRunsAllRefusesBeyondOverload(t *testing.T) {
	t.Parallel()
	cfg := fast()
	cfg.Shape = ShapeKnee
	cfg.Schedule = []Step{{Capacity: 3}}
	cfg.OverloadFactor = 2
	cfg.TimeScale = 1
	h := start(t, cfg, false)
	holds := h.hold(6, "/v1/chat/completions")
	h.waitStats("6 running", func(st Stats) bool { return st.Running == 6 })
	for _, tc := range []struct {
		path   string
		status int
	}{{"/v1/chat/completions", 429}, {"/v1/messages", 529}} {
		resp := h.mustPost(tc.path, `{"stream":true}`)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s beyond twice the knee: status %d retry-after %q, want %d with retry-after", tc.path, resp.StatusCode, resp.Header.Get("Retry-After"), tc.status)
		}
	}
	st := h.s.Stats()
	if st.Queued != 0 || st.MaxRunning != 6 || st.MaxInFlight != 6 || st.Overloaded != 2 {
		t.Errorf("stats %+v, want 6 running, none queued, 2 refused", st)
	}
	_ = h.s.Close()
	drain(holds)
}

// TestNoKneeNeverRefusesForLoad: without a knee every request runs at once,
// far beyond C and whatever OverloadFactor says; an outage (C = 0) still
// refuses.
func TestNoKneeNeverRefusesForLoad(t *testing.T) {
	t.Parallel()
	cfg := fast()
	cfg.Shape = ShapeNoKnee
	cfg.Schedule = []Step{{Capacity: 2}}
	cfg.OverloadFactor = 1.5
	cfg.TimeScale = 1
	h := start(t, cfg, false)
	holds := h.hold(8, "/v1/chat/completions")
	h.waitStats("8 running", func(st Stats) bool { return st.Running == 8 })
	if st := h.s.Stats(); st.Queued != 0 || st.Overloaded != 0 {
		t.Errorf("stats %+v, want 8 running, none queued or refused", st)
	}
	h.s.SetCapacity(0)
	resp := h.mustPost("/v1/chat/completions", `{"stream":true}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 {
		t.Errorf("outage: status %d, want 429", resp.StatusCode)
	}
	_ = h.s.Close()
	drain(holds)
}

// TestParseShape: the provider's -shape flag takes the three shapes, and
// nothing else.
func TestParseShape(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Shape{"": ShapeQueue, "queue": ShapeQueue, "knee": ShapeKnee, "no-knee": ShapeNoKnee} {
		if got, err := ParseShape(in); err != nil || got != want {
			t.Errorf("ParseShape(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseShape("ps"); err == nil {
		t.Error("ParseShape(\"ps\") succeeded")
	}
}
