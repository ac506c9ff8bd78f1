package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// progUpstream is an in-process upstream on loopback whose answer to each
// request is decided by the test's handler (n counts requests from 1).
type progUpstream struct {
	ln net.Listener
	n  atomic.Int64
}

func newProgUpstream(t *testing.T, h func(n int64, ctx *fasthttp.RequestCtx)) *progUpstream {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &progUpstream{ln: ln}
	srv := &fasthttp.Server{Logger: quietLogger{}, CloseOnShutdown: true, Handler: func(ctx *fasthttp.RequestCtx) {
		h(u.n.Add(1), ctx)
	}}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { _ = srv.Shutdown() })
	return u
}

func (u *progUpstream) url() string { return "http://" + u.ln.Addr().String() }

// sseTo writes an OpenAI stream of deltas content deltas to ctx, then a
// usage chunk (when in >= 0) and [DONE]; with stall, it stops after the
// deltas and holds the connection until the client leaves, and with
// breakAfter, it drops the connection after the deltas.
func sseTo(ctx *fasthttp.RequestCtx, deltas, in, out int, stall, breakAfter bool) {
	ctx.SetContentType("text/event-stream")
	conn := ctx.Conn()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		w.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n")
		for i := 0; i < deltas; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
		}
		if w.Flush() != nil {
			return
		}
		switch {
		case breakAfter:
			// The writer's bytes go out through a pipe: give them time to
			// reach the connection before it is dropped.
			time.Sleep(50 * time.Millisecond)
			_ = conn.Close()
			return
		case stall:
			b := make([]byte, 1)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			conn.Read(b) // until the proxy closes its side
			return
		}
		if in >= 0 {
			fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", in, out, in+out)
		}
		w.WriteString("data: [DONE]\n\n")
		w.Flush()
	})
}

// usageKind is one kind of request of the exactness test, with what it
// uses of the provider's quota.
type usageKind struct {
	name    string
	cancel  int  // the client leaves after this many content deltas
	sent    bool // reaches the upstream
	in, out int  // tokens used (in: -1 for the request's estimate)
}

// TestReserveSettleExactThroughProxy: after a mix of requests of known
// usage through the proxy (streams with and without usage, a JSON answer,
// streams the client cancels, streams that break, error answers, retried
// errors, requests to an upstream that refuses connections), each of the
// provider's buckets holds exactly its capacity less what was used. The
// clock is frozen: nothing refills.
func TestReserveSettleExactThroughProxy(t *testing.T) {
	t.Parallel()
	up := newProgUpstream(t, func(n int64, ctx *fasthttp.RequestCtx) {
		h := func(k string) int { v, _ := strconv.Atoi(string(ctx.Request.Header.Peek(k))); return v }
		switch string(ctx.Request.Header.Peek("x-kind")) {
		case "usage":
			sseTo(ctx, 3, h("x-in"), 7, false, false)
		case "nousage":
			sseTo(ctx, 4, -1, 0, false, false)
		case "json":
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}`)
		case "cancel":
			sseTo(ctx, 2, -1, 0, true, false)
		case "broken":
			sseTo(ctx, 2, -1, 0, false, true)
		case "500", "503":
			ctx.SetStatusCode(h("x-kind"))
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"error":{"message":"down","type":"server_error","param":null,"code":null}}`)
		}
	})
	dead, _ := net.Listen("tcp4", "127.0.0.1:0")
	deadURL := "http://" + dead.Addr().String()
	dead.Close()

	frozen := time.Now()
	limits := func(p *config.Provider) {
		p.Rate.RPM, p.Rate.TPM, p.Rate.InputTPM, p.Rate.OutputTPM = 1_000_000, 1_000_000_000, 900_000_000, 800_000_000
		p.Rate.PerClient.Key, p.Rate.PerClient.Header = settings.ClientKeyHeader, "X-Team"
		p.Rate.PerClient.TPM = 1_000_000_000
		p.Limit.Ceiling, p.Limit.Initial = 64, 64
		p.Retries.BackoffBase, p.Retries.BackoffMax = time.Millisecond, time.Millisecond
		p.Retries.MinPerSecond = 1000
		// Breakers off: every error answer is relayed, none opens them.
		p.Breaker.ConsecutiveFailures, p.Breaker.FailureRatio = 0, 0
	}
	cfg := testConfig(up.url(), limits)
	deadP := config.DefaultProvider()
	deadP.Name, deadP.Upstream, deadP.Match.PathPrefix = "dead", deadURL, "/dead"
	limits(&deadP)
	cfg.Providers = append(cfg.Providers, deadP)
	s := startSluiceWith(t, cfg, Options{Now: func() time.Time { return frozen }})

	kinds := []usageKind{
		{name: "usage", sent: true, in: 100, out: 7},
		{name: "nousage", sent: true, in: -1, out: 4},
		{name: "json", sent: true, in: 11, out: 5},
		{name: "cancel", cancel: 2, sent: true, in: -1, out: 2},
		{name: "broken", sent: true, in: -1, out: 2},
		{name: "500", sent: true},
		{name: "503", sent: true}, // retried once, both count as one request
	}
	body := `{"model":"m","stream":true,"max_tokens":300,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 40) + `"}]}`
	estimate := feedback.InspectRequest([]byte(body)).PromptTokens
	var used [adaptive.NumDims]int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	c := httpClient()
	for i := 0; i < 70; i++ {
		k := kinds[i%len(kinds)]
		in := k.in
		if in < 0 {
			in = estimate
		}
		hdr := map[string]string{"x-kind": k.name, "x-in": "100", "X-Team": "team" + strconv.Itoa(i%3)}
		mu.Lock()
		if k.sent {
			used[adaptive.DimRequests]++
			used[adaptive.DimTokens] += int64(in + k.out)
			used[adaptive.DimInput] += int64(in)
			used[adaptive.DimOutput] += int64(k.out)
		}
		mu.Unlock()
		wg.Go(func() { sendKind(t, c, s.base+"/fake/v1/chat/completions", body, hdr, k.cancel) })
		if i%10 == 0 {
			wg.Go(func() { sendKind(t, c, s.base+"/dead/v1/chat/completions", body, hdr, 0) })
		}
	}
	wg.Wait()
	lim, deadLim := s.srv.limiters.Limiter("fake"), s.srv.limiters.Limiter("dead")
	testutil.Eventually(t, "every request settled", 5*time.Second, func() bool {
		return lim.Stats().Inflight == 0 && deadLim.Stats().Inflight == 0 && s.srv.Live() == 0
	})
	capacity := [adaptive.NumDims]int64{1_000_000, 1_000_000_000, 900_000_000, 800_000_000}
	for _, p := range s.srv.Providers() {
		for d := adaptive.Dim(0); d < adaptive.NumDims; d++ {
			want := capacity[d]
			if p.Name == "fake" {
				want -= used[d]
			}
			if got := p.Rates.Provider[d].Level; got != want {
				t.Errorf("%s: %s level %d, want %d (capacity %d, used %d)", p.Name, d, got, want, capacity[d], capacity[d]-want)
			}
		}
	}
}

// sendKind sends one request and reads its answer; with cancelAfter > 0
// it leaves after reading that many content deltas.
func sendKind(t *testing.T, c *http.Client, url, body string, hdr map[string]string, cancelAfter int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
		return
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	seen := 0
	for {
		line, err := br.ReadString('\n')
		if strings.Contains(line, `"content"`) {
			seen++
			if cancelAfter > 0 && seen == cancelAfter {
				return // cancel: the deferred cancel closes the connection
			}
		}
		if err != nil {
			return
		}
	}
}

// TestRateLimitAnswers: a request the provider's rate: cannot fit within
// max_wait gets 429 from Sluice, X-Sluice-Rejected naming the scope and a
// Retry-After computed from the bucket, and never reaches the upstream;
// per client, one client's limit does not refuse another; a request
// larger than a whole minute's quota is refused without Retry-After and
// with "x-should-retry: false" (a retry cannot fit it; a rate 429 says
// nothing, and SDKs retry it); the client's key appears nowhere in the
// status document.
func TestRateLimitAnswers(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	frozen := time.Now()
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.Rate.RPM, p.Rate.TPM = 4, 100_000
		p.Rate.PerClient.RPM = 2 // keyed by the client's API key
		p.Queue.MaxWait = 5 * time.Second
	})
	s := startSluiceWith(t, cfg, Options{Now: func() time.Time { return frozen }})
	c := httpClient()
	send := func(key string, extra map[string]string) *http.Response {
		hdr := map[string]string{"Authorization": "Bearer " + key}
		for k, v := range extra {
			hdr[k] = v
		}
		resp := post(t, c, s.base+"/fake/v1/chat/completions", hdr)
		readAll(t, resp)
		return resp
	}
	for i := 0; i < 2; i++ {
		if r := send("sk-client-a-secret", nil); r.StatusCode != 200 {
			t.Fatalf("client a request %d: %d", i, r.StatusCode)
		}
	}
	// Client a's third: its own limit (2 per minute: one every 30 s).
	r := send("sk-client-a-secret", nil)
	if r.StatusCode != 429 || r.Header.Get(HeaderRejected) != "rate_limit_client" || r.Header.Get("Retry-After") != "30" ||
		r.Header.Get(HeaderShouldRetry) != "" {
		t.Fatalf("client over its limit: %d %s=%q Retry-After %q %s %q, want 429 rate_limit_client 30, retryable", r.StatusCode,
			HeaderRejected, r.Header.Get(HeaderRejected), r.Header.Get("Retry-After"), HeaderShouldRetry, r.Header.Get(HeaderShouldRetry))
	}
	for i := 0; i < 2; i++ {
		if r := send("sk-client-b-secret", nil); r.StatusCode != 200 {
			t.Fatalf("client b request %d: %d (another client's limit refused it)", i, r.StatusCode)
		}
	}
	// The provider's 4 per minute are spent: one every 15 s.
	r = send("sk-client-c-secret", nil)
	if r.StatusCode != 429 || r.Header.Get(HeaderRejected) != "rate_limit_provider" || r.Header.Get("Retry-After") != "15" {
		t.Fatalf("provider over its limit: %d %s=%q Retry-After %q, want 429 rate_limit_provider 15", r.StatusCode,
			HeaderRejected, r.Header.Get(HeaderRejected), r.Header.Get("Retry-After"))
	}
	if got := up.requests.Load(); got != 4 {
		t.Errorf("upstream saw %d requests, want 4", got)
	}
	big := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-d"})
	readAll(t, big)
	req, _ := http.NewRequest("POST", s.base+"/fake/v1/chat/completions",
		strings.NewReader(`{"model":"m","max_tokens":200000,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 429 || resp.Header.Get(HeaderRejected) != "over_quota" || resp.Header.Get("Retry-After") != "" ||
		resp.Header.Get(HeaderShouldRetry) != "false" {
		t.Errorf("too large: %d %s=%q Retry-After %q %s %q, want 429 over_quota, no Retry-After, x-should-retry false", resp.StatusCode,
			HeaderRejected, resp.Header.Get(HeaderRejected), resp.Header.Get("Retry-After"), HeaderShouldRetry, resp.Header.Get(HeaderShouldRetry))
	}
	st := s.srv.Providers()[0]
	if st.Rates.Limited[adaptive.ScopeClient] != 1 || st.Rates.Limited[adaptive.ScopeProvider] != 2 || st.Rates.TooLarge != 1 || st.Rates.ClientKeys < 3 {
		t.Errorf("rate stats %+v", st.Rates)
	}
	if doc := fmt.Sprintf("%+v", s.srv.Providers()); strings.Contains(doc, "secret") {
		t.Error("a client's key appears in the provider state")
	}
}

// TestRateWaitWithinMaxWait: a request that fits its rate after a short
// wait waits (its tokens reserved), then goes; the wait comes out of
// max_wait.
func TestRateWaitWithinMaxWait(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	frozen := time.Now()
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.Rate.RPM = 600 // one every 100 ms once the minute's 600 are spent
		p.Queue.MaxWait = 5 * time.Second
	})
	s := startSluiceWith(t, cfg, Options{Now: func() time.Time { return frozen }})
	// Spend the bucket without traffic: 600 reservations settled as sent.
	rates := s.srv.snap.Load().providers[0].adm.Rates
	for i := 0; i < 600; i++ {
		var res adaptive.Reservation
		if dec := rates.Reserve(frozen, 0, rates.Demand(1, 1), nil, 0, &res); dec.Limited {
			t.Fatalf("reservation %d refused", i)
		}
		res.Settle(frozen, adaptive.Usage{Sent: true})
	}
	start := time.Now()
	resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", nil)
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("answered after %v, want a wait of at least 100ms for the rate", waited)
	}
	if st := s.srv.Providers()[0].Rates; st.Waited != 1 {
		t.Errorf("waited %d, want 1", st.Waited)
	}
}

// TestRateRefusalIsNotCongestionUnderAConfiguredRate: with rate.rpm
// configured, the provider's 429 rate-limit answer to a request sent
// within that rate does not cut the concurrency limit (the rate layer
// answers it); without, it is a drop, as before. Either way it is
// retried and relayed.
func TestRateRefusalIsNotCongestionUnderAConfiguredRate(t *testing.T) {
	t.Parallel()
	for _, rpm := range []int{0, 600} {
		t.Run(fmt.Sprintf("rpm %d", rpm), func(t *testing.T) {
			t.Parallel()
			up := newFakeUpstream(t)
			s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
				p.Limit.Algorithm, p.Limit.Ceiling, p.Limit.Initial, p.Limit.Cooldown = settings.AlgorithmAIMD, 20, 10, 0
				p.Rate.RPM = rpm
				p.Retries.BackoffBase, p.Retries.BackoffMax = time.Millisecond, time.Millisecond
			}))
			lim := s.srv.limiters.Limiter("fake")
			before := lim.Stats().Limit
			for i := 0; i < 5; i++ {
				resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{"x-status": "429"})
				if readAll(t, resp); resp.StatusCode != 429 || resp.Header.Get(HeaderRejected) != "" {
					t.Fatalf("status %d %s=%q: want the provider's 429 relayed", resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected))
				}
			}
			testutil.Eventually(t, "permits released", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 })
			st := lim.Stats()
			if got := up.requests.Load(); got != 10 {
				t.Errorf("upstream saw %d requests, want 10 (each retried once)", got)
			}
			if rpm > 0 && (st.Drops[control.DropRateLimit] != 0 || st.Limit != before) {
				t.Errorf("under a configured rate: %d drops, limit %d -> %d; want none, unchanged", st.Drops[control.DropRateLimit], before, st.Limit)
			}
			if rpm == 0 && (st.Drops[control.DropRateLimit] != 5 || st.Limit >= before) {
				t.Errorf("without a rate: %d drops, limit %d -> %d; want 5 and a cut", st.Drops[control.DropRateLimit], before, st.Limit)
			}
		})
	}
}

// TestMidStreamRateErrorIsNotCongestionUnderAConfiguredRate: the same rule
// for a rate-limit error event inside a 200 stream (a provider that refuses
// after the headers): a drop without rate.rpm, nothing with it. The
// client gets the stream as the provider sent it either way.
func TestMidStreamRateErrorIsNotCongestionUnderAConfiguredRate(t *testing.T) {
	t.Parallel()
	const rateEvent = `event: error` + "\n" + `data: {"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}` + "\n\n"
	for _, rpm := range []int{0, 600} {
		t.Run(fmt.Sprintf("rpm %d", rpm), func(t *testing.T) {
			t.Parallel()
			up := scriptedUpstream(t, func(c net.Conn) {
				write(c, sseHead, chunk(roleEvent), chunk(rateEvent), "0\r\n\r\n")
			})
			s := startSluice(t, testConfig(up, func(p *config.Provider) {
				p.Limit.Algorithm, p.Limit.Ceiling, p.Limit.Initial, p.Limit.Cooldown = settings.AlgorithmAIMD, 20, 10, 0
				p.Rate.RPM = rpm
			}))
			lim := s.srv.limiters.Limiter("fake")
			resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", nil)
			if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, "rate_limit_exceeded") {
				t.Fatalf("status %d body %q: want the stream with its error event", resp.StatusCode, body)
			}
			testutil.Eventually(t, "permit released", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 })
			want := uint64(1)
			if rpm > 0 {
				want = 0
			}
			if got := lim.Stats().Drops[control.DropRateLimit]; got != want {
				t.Errorf("rate-limit drops %d, want %d", got, want)
			}
		})
	}
}
