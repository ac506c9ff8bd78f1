package load

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/bench/sim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	)
}

func TestMatcherAcrossPieces(t *testing.T) {
	stream := `data: {"choices":[{"delta":{"role":"assistant","content":""}}]}` + "\n\n" +
		strings.Repeat(`data: {"choices":[{"delta":{"content":"tok "}}]}`+"\n\n", 7) +
		`data: {"choices":[{"delta":{"content":"\"quoted\""}}]}` + "\n\n" + // starts with an escaped quote: counts
		"data: [DONE]\n\n"
	want := 8
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		m := newMatcher([]byte(`"content":"`), true)
		done := newMatcher([]byte("data: [DONE]"), false)
		got, fin := 0, 0
		b := []byte(stream)
		for len(b) > 0 {
			n := 1 + rng.IntN(min(len(b), 40))
			if trial == 0 {
				n = len(b)
			}
			got += m.count(b[:n])
			fin += done.count(b[:n])
			b = b[n:]
		}
		if got != want || fin != 1 {
			t.Fatalf("trial %d: tokens %d (want %d), done %d (want 1)", trial, got, want, fin)
		}
	}
}

func TestMatcherOverlappingPattern(t *testing.T) {
	m := newMatcher([]byte("aab"), false)
	if got := m.count([]byte("aaab aab aaaab")); got != 3 {
		t.Fatalf("got %d, want 3", got)
	}
}

func TestDist(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	d := Dist{Mean: 1000, Sigma: 0.5, Max: 2000}
	sum, n := 0, 20000
	for range n {
		v := d.Draw(rng)
		if v < 1 || v > 2000 {
			t.Fatalf("draw %d out of [1, 2000]", v)
		}
		sum += v
	}
	if mean := float64(sum) / float64(n); mean < 900 || mean > 1010 {
		t.Fatalf("mean %.0f, want about 1000 (a little less: capped at 2000)", mean)
	}
	if v := (Dist{Mean: 42}).Draw(rng); v != 42 {
		t.Fatalf("constant dist drew %d", v)
	}
	if v := (Dist{}).Draw(rng); v != 0 {
		t.Fatalf("zero dist drew %d", v)
	}
}

// startSim serves a simulated provider on loopback for the test.
func startSim(t *testing.T, cfg sim.Config) string {
	t.Helper()
	s := sim.New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return "http://" + ln.Addr().String()
}

func TestClosedLoopAgainstSim(t *testing.T) {
	base := startSim(t, sim.Config{Schedule: []sim.Step{{Capacity: 100}}, TimeScale: 0.05, JitterSigma: -1, ITLLoad: -1, Seed: 1})
	res, err := Run(context.Background(), Config{
		URL:        base + "/v1/chat/completions",
		Stream:     true,
		SimHeaders: true,
		Clients:    8,
		Think:      5 * time.Millisecond,
		Duration:   600 * time.Millisecond,
		Prompt:     Dist{Mean: 500, Sigma: 0.5},
		Output:     Dist{Mean: 20, Sigma: 0.5, Max: 60},
		Seed:       3,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Summary()
	if s.OK < 20 || s.Failed+s.RejectedSluice+s.RejectedUpstream != 0 {
		t.Fatalf("want only OK requests, got %+v", s)
	}
	for _, r := range res.Records {
		if r.Outcome != OK {
			continue
		}
		if r.Tokens != r.OutputTokens {
			t.Fatalf("record counted %d tokens, asked for %d: %+v", r.Tokens, r.OutputTokens, r)
		}
		if r.TTFB <= 0 || r.TTFT < r.TTFB || r.LastToken < r.TTFT || r.Total < r.LastToken {
			t.Fatalf("timings out of order: %+v", r)
		}
	}
	// TTFT is 250 ms model = 12.5 ms real plus prefill (500/8000 s model).
	if p := s.TTFT.P50; p < 12*time.Millisecond || p > 200*time.Millisecond {
		t.Errorf("TTFT p50 %v, want about 16 ms", p)
	}
	// ITL is 20 ms model = 1 ms real (a late timer makes the simulator
	// catch up with a burst, so only the mean is exact).
	if m := s.ITL.Mean; m < 800*time.Microsecond || m > 10*time.Millisecond {
		t.Errorf("ITL mean %v, want about 1 ms", m)
	}
	if s.Tokens == 0 || s.TokensPerSecond <= 0 {
		t.Errorf("no goodput: %+v", s)
	}
}

func TestCutAtEnd(t *testing.T) {
	// Streams that take far longer than the run: every one is cut.
	base := startSim(t, sim.Config{Schedule: []sim.Step{{Capacity: 100}}, TimeScale: 1, Seed: 1})
	start := time.Now()
	res, err := Run(context.Background(), Config{
		URL: base + "/v1/messages", Stream: true, SimHeaders: true,
		Clients: 4, Duration: 300 * time.Millisecond,
		Prompt: Dist{Mean: 100}, Output: Dist{Mean: 1000},
	})
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("run took %v: cutting did not end the streams", el)
	}
	s := res.Summary()
	if s.Cut != 4 || s.Requests != 0 {
		t.Fatalf("want 4 cut requests and none counted, got %+v", s)
	}
}

// fakeServer answers by the x-answer header of each request.
func fakeServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Request.Header.Peek("x-answer")) {
		case "sluice503":
			ctx.Response.Header.Set("X-Sluice-Rejected", "queue_full")
			ctx.Response.Header.Set("Retry-After", "3")
			ctx.Response.Header.Set("Retry-After-Ms", "2500")
			ctx.SetStatusCode(503)
		case "sluice429":
			ctx.Response.Header.Set("X-Sluice-Rejected", "over_share")
			ctx.Response.Header.Set("Retry-After", "2")
			ctx.SetStatusCode(429)
		case "upstream429":
			ctx.SetStatusCode(429)
		case "upstream529":
			ctx.SetStatusCode(529)
		case "sluice504":
			ctx.Response.Header.Set("X-Sluice-Error", "first_token_timeout")
			ctx.SetStatusCode(504)
		case "truncated":
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStream(strings.NewReader(`data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n"), -1)
		case "buffered":
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyString(`data: {"choices":[{"delta":{"content":"x"}}]}` + "\n\n" +
				`data: {"choices":[{"delta":{"content":"y"}}]}` + "\n\ndata: [DONE]\n\n")
		}
	}, MaxIdleWorkerDuration: 50 * time.Millisecond}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func TestOutcomes(t *testing.T) {
	base := fakeServer(t)
	cases := []struct {
		answer string
		want   Outcome
		reason string
		tokens int
		retry  time.Duration
	}{
		{"sluice503", RejectedSluice, "queue_full", 0, 2500 * time.Millisecond},
		{"sluice429", RejectedSluice, "over_share", 0, 2 * time.Second},
		{"upstream429", RejectedUpstream, "", 0, 0},
		{"upstream529", RejectedUpstream, "", 0, 0},
		{"sluice504", Failed, "first_token_timeout", 0, 0},
		{"truncated", Failed, "stream ended without its terminal event", 1, 0},
		{"buffered", OK, "", 2, 0},
	}
	for _, tc := range cases {
		t.Run(tc.answer, func(t *testing.T) {
			cfg := Config{URL: base + "/v1/chat/completions", Stream: true, Headers: map[string]string{"x-answer": tc.answer}}
			c, err := newClient(&cfg, 4, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer c.stop()
			var x exchange
			rec := Record{PromptTokens: 10, OutputTokens: 5}
			c.do(&x, &rec, nil)
			if rec.Outcome != tc.want || rec.Reason != tc.reason || rec.Tokens != tc.tokens || rec.RetryAfter != tc.retry {
				t.Fatalf("got outcome %v reason %q tokens %d retry after %v, want %v %q %d %v",
					rec.Outcome, rec.Reason, rec.Tokens, rec.RetryAfter, tc.want, tc.reason, tc.tokens, tc.retry)
			}
		})
	}
}

func TestOpenLoopRate(t *testing.T) {
	base := startSim(t, sim.Config{Schedule: []sim.Step{{Capacity: 1000}}, TimeScale: 0.001, Seed: 1})
	res, err := Run(context.Background(), Config{
		URL: base + "/v1/chat/completions", Rate: 400, Duration: 500 * time.Millisecond,
		Prompt: Dist{Mean: 50}, Output: Dist{Mean: 5}, SimHeaders: true, Seed: 9,
	})
	if err != nil {
		t.Fatal(err)
	}
	// 200 expected arrivals; Poisson sd ~14.
	if n := len(res.Records); n < 130 || n > 270 {
		t.Fatalf("%d arrivals in 0.5 s at 400/s", n)
	}
	// Time-varying: nothing in the first half, 400/s in the second.
	res, err = Run(context.Background(), Config{
		URL: base + "/v1/chat/completions", MaxRate: 400, Duration: 500 * time.Millisecond,
		RateAt: func(e time.Duration) float64 {
			if e < 250*time.Millisecond {
				return 0
			}
			return 400
		},
		Prompt: Dist{Mean: 50}, Output: Dist{Mean: 5}, SimHeaders: true, Seed: 9,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Records {
		if r.Start < 240*time.Millisecond {
			t.Fatalf("arrival at %v while the rate was 0", r.Start)
		}
	}
	if n := len(res.Records); n < 50 || n > 160 {
		t.Fatalf("%d arrivals in 0.25 s at 400/s", n)
	}
}

func TestSeries(t *testing.T) {
	ms := time.Millisecond
	recs := []Record{
		{Start: 0, Outcome: OK, TTFT: 50 * ms, Total: 150 * ms, Tokens: 10},     // ends in bucket 1
		{Start: 20 * ms, Outcome: RejectedUpstream, Total: 1 * ms},              // ends in bucket 0
		{Start: 120 * ms, Outcome: RejectedSluice, Total: 100 * ms},             // ends in bucket 2
		{Start: 210 * ms, Outcome: Cut, TTFT: 30 * ms, Total: 90 * ms},          // still running at the end
		{Start: 110 * ms, Outcome: Failed, Reason: "x", Total: 5 * ms, TTFT: 0}, // bucket 1
	}
	b := SeriesOf(recs, 300*ms, 100*ms)
	if len(b) != 3 {
		t.Fatalf("%d buckets", len(b))
	}
	type row struct{ started, ok, rs, ru, f, tok, inflight, ttftN int }
	got := []row{}
	for _, x := range b {
		got = append(got, row{x.Started, x.OK, x.RejectedSluice, x.RejectedUpstream, x.Failed, x.Tokens, x.InFlight, x.TTFTCount})
	}
	want := []row{
		{2, 0, 0, 1, 0, 0, 1, 1},
		{2, 1, 0, 0, 1, 10, 1, 0},
		{1, 0, 1, 0, 0, 0, 1, 1},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("bucket %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	// Per-bucket TTFT percentiles, over first tokens arriving in the
	// bucket (whatever the outcome), to HdrHistogram's 3 digits.
	near := func(got, want time.Duration) bool { return got >= want && got <= want+want/1000 }
	if !near(b[0].TTFTP50, 50*ms) || !near(b[0].TTFTP99, 50*ms) || !near(b[2].TTFTP99, 30*ms) || b[1].TTFTP50 != 0 {
		t.Errorf("TTFT per bucket: %v/%v, %v/%v, %v/%v", b[0].TTFTP50, b[0].TTFTP99, b[1].TTFTP50, b[1].TTFTP99, b[2].TTFTP50, b[2].TTFTP99)
	}
	s := Summarize(recs, 300*ms)
	if s.Requests != 4 || s.Cut != 1 || s.OK != 1 || s.Reasons["x"] != 1 || s.TTFT.P50 < 50*ms || s.TTFT.P50 > 50100*time.Microsecond {
		t.Errorf("summary %+v", s)
	}
}

func TestBodySize(t *testing.T) {
	c := &client{model: "m", stream: true, maxTok: MaxTokensDrawn}
	b := c.appendBody(nil, 1000, 50)
	if n := len(b); n < 3900 || n > 4100 {
		t.Fatalf("body for 1000 prompt tokens is %d bytes, want about 4000", n)
	}
	if !bytes.Contains(b, []byte(`"max_tokens":50`)) || !bytes.Contains(b, []byte(`"stream":true`)) {
		t.Fatalf("body %.100s", b)
	}
}
