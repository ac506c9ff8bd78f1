package proxy

import (
	"io"
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
)

// twoUpstreams configures provider "fake" with upstreams a and b.
func twoUpstreams(a, b string, mut func(p *config.Provider)) *config.Config {
	return testConfig("", func(p *config.Provider) {
		p.Upstream = ""
		p.Upstreams = []config.Upstream{config.DefaultUpstream(), config.DefaultUpstream()}
		p.Upstreams[0].Name, p.Upstreams[0].URL = "a", a
		p.Upstreams[1].Name, p.Upstreams[1].URL = "b", b
		p.Limit.Ceiling, p.Limit.Initial = 16, 16
		if mut != nil {
			mut(p)
		}
	})
}

// goodStream answers every request with a short stream.
func goodStream(_ int64, ctx *fasthttp.RequestCtx) { sseTo(ctx, 3, -1, 0, false, false) }

// failing500 answers every request 500.
func failing500(_ int64, ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(500)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`)
}

// resetting returns an upstream that resets every connection after
// reading a request, and the count of requests it read.
func resetting(t *testing.T) (string, *atomic.Int64) {
	var n atomic.Int64
	return scriptedUpstream(t, func(c net.Conn) { n.Add(1); reset(c) }), &n
}

// readStream reads a streamed answer whole and reports whether it ended
// cleanly with [DONE].
func readStream(resp *http.Response) bool {
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return err == nil && strings.Contains(string(b), "[DONE]")
}

// TestOneOfTwoUpstreamsFailing (the must-show, end to end): with
// one of two upstreams answering 500s, or resetting every connection,
// clients see under 1% errors (a failed attempt is retried on the other
// upstream before anything reached the client), answers name the
// upstream that served them, failovers are counted, and while its breaker
// is open the failing upstream gets only the half-open probes.
func TestOneOfTwoUpstreamsFailing(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"500s", "resets"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			good := newProgUpstream(t, goodStream)
			var badURL string
			var badRequests func() int64
			if kind == "500s" {
				bad := newProgUpstream(t, failing500)
				badURL, badRequests = bad.url(), bad.n.Load
			} else {
				u, n := resetting(t)
				badURL, badRequests = u, n.Load
			}
			const openTime, probes, consecutive = 150 * time.Millisecond, 2, 5
			cfg := twoUpstreams(good.url(), badURL, func(p *config.Provider) {
				p.Breaker.OpenTime, p.Breaker.HalfOpenProbes, p.Breaker.ConsecutiveFailures = openTime, probes, consecutive
				p.Retries.BackoffBase, p.Retries.BackoffMax = time.Millisecond, 5*time.Millisecond
			})
			s := startSluice(t, cfg)
			const clients, perClient = 8, 60
			var errs, total atomic.Int64
			var wrongName atomic.Value
			var wg sync.WaitGroup
			c := httpClient()
			for range clients {
				wg.Go(func() {
					for range perClient {
						resp := post(t, c, s.base+"/fake/v1/chat/completions", nil)
						name := resp.Header.Get(HeaderUpstream)
						if resp.StatusCode != 200 || !readStream(resp) {
							errs.Add(1)
						} else if name != "a" {
							wrongName.Store(name)
						}
						total.Add(1)
						time.Sleep(2 * time.Millisecond)
					}
				})
			}
			wg.Wait()
			if e, n := errs.Load(), total.Load(); e*100 >= n {
				t.Errorf("clients saw %d errors in %d requests, want under 1%%", e, n)
			}
			if v := wrongName.Load(); v != nil {
				t.Errorf("an answer named upstream %q, want a", v)
			}
			st := s.srv.Providers()[0]
			a, b := st.Upstreams[0], st.Upstreams[1]
			// Before it first opens, at most consecutive failures plus the
			// attempts already in flight reach b; after, only probes: at
			// most half_open_probes per opening.
			limit := int64(consecutive+clients-1) + int64(b.Breaker.Opened)*probes
			if got := badRequests(); got > limit || b.Breaker.Opened < 2 {
				t.Errorf("b got %d requests, breaker opened %d times: want at most %d (probes only while open) and reopened by failed probes",
					got, b.Breaker.Opened, limit)
			}
			if a.Failovers == 0 || st.Retries.Decisions[adaptive.RetryYes] == 0 {
				t.Errorf("failovers to a %d, retries %d: want both counted", a.Failovers, st.Retries.Decisions[adaptive.RetryYes])
			}
			t.Logf("%d requests, %d client errors; b: %d requests, opened %d times; failovers to a: %d; retries %v",
				total.Load(), errs.Load(), badRequests(), b.Breaker.Opened, a.Failovers, st.Retries.Decisions)
		})
	}
}

// TestEveryBreakerOpenFailsFast: when every upstream's breaker is open,
// requests are answered 503 no_upstream at once, with a Retry-After of
// when a breaker lets a probe through, and reach no upstream.
func TestEveryBreakerOpenFailsFast(t *testing.T) {
	t.Parallel()
	a, b := newProgUpstream(t, failing500), newProgUpstream(t, failing500)
	s := startSluice(t, twoUpstreams(a.url(), b.url(), func(p *config.Provider) {
		p.Breaker.OpenTime, p.Breaker.ConsecutiveFailures = 20*time.Second, 2
	}))
	c := httpClient()
	var statuses []string
	for i := 0; i < 6; i++ {
		resp := post(t, c, s.base+"/fake/v1/chat/completions", nil)
		readAll(t, resp)
		statuses = append(statuses, strconv.Itoa(resp.StatusCode)+" "+resp.Header.Get(HeaderRejected)+" "+resp.Header.Get("Retry-After"))
	}
	// Each request tries a, then b (a 500 is retried elsewhere): two
	// requests open both breakers.
	want := []string{"500  ", "500  ", "503 no_upstream 20", "503 no_upstream 20", "503 no_upstream 20", "503 no_upstream 20"}
	if strings.Join(statuses, "|") != strings.Join(want, "|") {
		t.Errorf("answers %q, want %q", statuses, want)
	}
	if na, nb := a.n.Load(), b.n.Load(); na != 2 || nb != 2 {
		t.Errorf("upstreams saw %d and %d requests, want 2 each", na, nb)
	}
}

// TestClientNeverGetsTwoAttempts: a failed answer is never relayed in
// part: the client gets the retry's status, headers and body only; when no
// retry can be made, it gets the failed answer whole; a stream that broke
// after its first bytes is never retried.
func TestClientNeverGetsTwoAttempts(t *testing.T) {
	t.Parallel()
	first := func(n int64, ctx *fasthttp.RequestCtx) {
		if n == 1 {
			ctx.SetStatusCode(503)
			ctx.Response.Header.Set("X-Attempt", "first")
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"error":{"message":"FIRST","type":"server_error","param":null,"code":null}}`)
			return
		}
		ctx.Response.Header.Set("X-Attempt-Ok", "second")
		sseTo(ctx, 2, -1, 0, false, false)
	}
	up := newProgUpstream(t, first)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Retries.BackoffBase, p.Retries.BackoffMax = time.Millisecond, time.Millisecond
	}))
	resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", nil)
	body := readAll(t, resp)
	if resp.StatusCode != 200 || resp.Header.Get("X-Attempt") != "" || resp.Header.Get("X-Attempt-Ok") != "second" ||
		strings.Contains(body, "FIRST") || !strings.Contains(body, "[DONE]") {
		t.Errorf("client got %d, headers %v, body %q: want the second attempt's answer only", resp.StatusCode, resp.Header, body)
	}

	// No retry possible (max_attempts 1): the failed answer, whole.
	up2 := newProgUpstream(t, first)
	s2 := startSluice(t, testConfig(up2.url(), func(p *config.Provider) { p.Retries.MaxAttempts = 1 }))
	resp = post(t, httpClient(), s2.base+"/fake/v1/chat/completions", nil)
	if body := readAll(t, resp); resp.StatusCode != 503 || resp.Header.Get("X-Attempt") != "first" || !strings.Contains(body, "FIRST") {
		t.Errorf("without retries: %d %q", resp.StatusCode, body)
	}

	// A stream that breaks mid-way: its bytes reached the client, no retry.
	var breaks atomic.Int64
	up3 := newProgUpstream(t, func(_ int64, ctx *fasthttp.RequestCtx) { breaks.Add(1); sseTo(ctx, 2, -1, 0, false, true) })
	s3 := startSluice(t, testConfig(up3.url(), nil))
	resp = post(t, httpClient(), s3.base+"/fake/v1/chat/completions", nil)
	if resp.StatusCode != 200 || readStream(resp) || breaks.Load() != 1 {
		t.Errorf("broken stream: status %d, upstream requests %d: want 200, truncated, one attempt", resp.StatusCode, breaks.Load())
	}
}

// retryRow is one row of the retry table, end to end: what the upstream
// answers to the first attempt (later ones succeed), and how many attempts
// reach it and what the client sees.
type retryRow struct {
	name     string
	first    func(ctx *fasthttp.RequestCtx) // nil: reset the connection before answering
	mut      func(p *config.Provider)
	attempts int64
	status   int
}

func statusAnswer(status int, body string, hdr ...string) func(ctx *fasthttp.RequestCtx) {
	return func(ctx *fasthttp.RequestCtx) {
		for i := 0; i+1 < len(hdr); i += 2 {
			ctx.Response.Header.Set(hdr[i], hdr[i+1])
		}
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBodyString(body)
	}
}

const (
	rateLimited = `{"error":{"message":"slow down","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	noQuota     = `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	badRequest  = `{"error":{"message":"context_length_exceeded","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}`
	serverError = `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`
)

var retryRows = []retryRow{
	{name: "503 retried", first: statusAnswer(503, serverError), attempts: 2, status: 200},
	{name: "529 retried", first: statusAnswer(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), attempts: 2, status: 200},
	{name: "429 with a short retry-after-ms retried", first: statusAnswer(429, rateLimited, "retry-after-ms", "30"), attempts: 2, status: 200},
	{name: "429 with Retry-After beyond max_retry_after", first: statusAnswer(429, rateLimited, "Retry-After", "30"), attempts: 1, status: 429},
	{name: "429 insufficient_quota never", first: statusAnswer(429, noQuota), attempts: 1, status: 429},
	{name: "400 never", first: statusAnswer(400, badRequest), attempts: 1, status: 400},
	{name: "401 never", first: statusAnswer(401, `{"error":{"message":"bad key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`), attempts: 1, status: 401},
	{name: "500 with no other upstream", first: statusAnswer(500, serverError), attempts: 1, status: 500},
	{name: "reset before headers retried", first: nil, attempts: 2, status: 200},
	{name: "budget exhausted", first: statusAnswer(503, serverError), attempts: 1, status: 503,
		mut: func(p *config.Provider) { p.Retries.BudgetRatio, p.Retries.MinPerSecond = 0, 0 }},
	{name: "max_attempts 1", first: statusAnswer(503, serverError), attempts: 1, status: 503,
		mut: func(p *config.Provider) { p.Retries.MaxAttempts = 1 }},
	// The wait is the upstream's Retry-After here: a backoff alone is
	// drawn with full jitter and may be short enough to fit.
	{name: "wait past the total timeout", first: statusAnswer(503, serverError, "retry-after-ms", "5000"), attempts: 1, status: 503,
		mut: func(p *config.Provider) {
			p.Retries.MaxRetryAfter = time.Minute
			p.Timeouts.Total, p.Timeouts.FirstToken = 100*time.Millisecond, 100*time.Millisecond
		}},
}

// TestRetryTable: which failures are retried through the proxy, and what
// the client gets (adaptive's TestRetryDecide has the decisions in full).
func TestRetryTable(t *testing.T) {
	t.Parallel()
	for _, row := range retryRows {
		t.Run(row.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			var url string
			if row.first == nil {
				url = scriptedUpstream(t, func(c net.Conn) {
					if n.Add(1) == 1 {
						reset(c)
						return
					}
					write(c, sseHead, chunk(roleEvent), chunk(tokEvent), chunk(doneEvent), "0\r\n\r\n")
				})
			} else {
				up := newProgUpstream(t, func(k int64, ctx *fasthttp.RequestCtx) {
					n.Add(1)
					if k == 1 {
						row.first(ctx)
						return
					}
					sseTo(ctx, 2, -1, 0, false, false)
				})
				url = up.url()
			}
			s := startSluice(t, testConfig(url, func(p *config.Provider) {
				p.Retries.BackoffBase, p.Retries.BackoffMax = time.Millisecond, time.Millisecond
				if row.mut != nil {
					row.mut(p)
				}
			}))
			resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", nil)
			readAll(t, resp)
			if resp.StatusCode != row.status || n.Load() != row.attempts {
				t.Errorf("client got %d after %d attempts, want %d after %d", resp.StatusCode, n.Load(), row.status, row.attempts)
			}
		})
	}
}

// TestUpstreamKeysAndHeaders: each upstream is sent its own key and
// headers (over the provider's), and the provider's key where it has none
// of its own; the one upstream: form is upstream "0" with the provider's.
func TestUpstreamKeysAndHeaders(t *testing.T) {
	t.Parallel()
	cfg := twoUpstreams("http://a.example", "https://b.example:8443/v1", func(p *config.Provider) {
		p.APIKey = "sk-provider"
		p.Headers = map[string]string{"X-Region": "default", "X-Team": "t"}
		p.Upstreams[1].APIKey = "sk-b"
		p.Upstreams[1].Headers = map[string]string{"X-Region": "eu"}
	})
	pc := &cfg.Providers[0]
	hdrs := func(up *upstream) map[string]string {
		m := map[string]string{}
		for _, kv := range up.headers {
			m[string(kv[0])] = string(kv[1])
		}
		return m
	}
	a := buildUpstream(pc, pc.Upstreams[0], nil)
	b := buildUpstream(pc, pc.Upstreams[1], nil)
	if string(a.authValue) != "Bearer sk-provider" || hdrs(a)["X-Region"] != "default" || string(a.host) != "a.example" {
		t.Errorf("a: auth %q headers %v host %q", a.authValue, hdrs(a), a.host)
	}
	if string(b.authValue) != "Bearer sk-b" || hdrs(b)["X-Region"] != "eu" || hdrs(b)["X-Team"] != "t" ||
		string(b.host) != "b.example:8443" || string(b.basePath) != "/v1" || string(b.nameHdr) != "b" {
		t.Errorf("b: auth %q headers %v host %q path %q", b.authValue, hdrs(b), b.host, b.basePath)
	}
	one := testConfig("http://one.example", func(p *config.Provider) { p.APIKey = "sk-one" }).Providers[0]
	ucs := upstreamConfigs(&one)
	if len(ucs) != 1 || ucs[0].Name != adaptive.SingleUpstream || buildUpstream(&one, ucs[0], nil).name != "0" ||
		string(buildUpstream(&one, ucs[0], nil).authValue) != "Bearer sk-one" {
		t.Errorf("one upstream: %+v", ucs)
	}
}

func TestIsRateLimitHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"x-ratelimit-remaining-tokens": true, "X-RateLimit-Limit-Requests": true, "anthropic-ratelimit-tokens-reset": true,
		"Anthropic-Ratelimit-Requests-Limit": true, "x-request-id": false, "content-type": false, "anthropic-version": false,
		"x-ratelimit": false, "anthropic-ratelimit-": false, "": false,
	} {
		if got := feedback.IsRateLimitHeader([]byte(name)); got != want {
			t.Errorf("isRateLimitHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestStaleKeepAliveConnectionsAreRedialed: an upstream that closed its
// idle keep-alive connections (its idle timeout, a restart) leaves Sluice's
// pool full of dead connections. Requests that take one are sent again on a
// new connection, without a failed attempt: with retries off every request
// still succeeds and the breaker stays closed.
func TestStaleKeepAliveConnectionsAreRedialed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int64
	up := &fasthttp.Server{Logger: quietLogger{}, IdleTimeout: 50 * time.Millisecond, Handler: func(ctx *fasthttp.RequestCtx) {
		served.Add(1)
		time.Sleep(20 * time.Millisecond) // concurrent requests open connections of their own
		statusAnswer(200, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)(ctx)
	}}
	go up.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { _ = up.Shutdown() })
	s := startSluice(t, testConfig("http://"+ln.Addr().String(), func(p *config.Provider) {
		p.Retries.MaxAttempts = 1
	}))
	url := s.base + "/fake/v1/chat/completions"
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, httpClient(), url, nil)
			readAll(t, resp)
		}()
	}
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // the upstream closes every idle connection
	for i := range 8 {
		resp := post(t, httpClient(), url, nil)
		if body := readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("request %d after the upstream closed its idle connections: %d %s", i, resp.StatusCode, body)
		}
	}
	if got := served.Load(); got != 16 {
		t.Errorf("upstream served %d requests, want 16", got)
	}
	lim := s.srv.limiters.Limiter("fake")
	testutil.Eventually(t, "every permit released", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 })
	if st := lim.Stats(); st.Drops != [control.NumDropKinds]uint64{} {
		t.Errorf("the redialed connections reached the controller as drops: %v", st.Drops)
	}
}
