package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// accountRefusal answers ctx as a provider whose account (its key, or its
// key's quota for one model) is spent: 429 rate_limit_exceeded with the
// account's rate-limit headers and a Retry-After.
func accountRefusal(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("x-ratelimit-limit-requests", "100")
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "1h0m0s")
	h.Set("retry-after", "30")
	ctx.SetStatusCode(429)
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
}

// accountAnswer answers ctx with a whole answer from an account with room.
func accountAnswer(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("x-ratelimit-limit-requests", "10000")
	h.Set("x-ratelimit-remaining-requests", "9990")
	h.Set("x-ratelimit-reset-requests", "6ms")
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
}

// accountRequest posts a non-streaming chat request for model with the
// given API key (none when empty).
func accountRequest(t *testing.T, c *http.Client, url, key, model string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	readAll(t, resp)
	return resp
}

func noRetries(p *config.Provider) {
	p.Retries.MaxAttempts = 1
}

// TestPassthroughKeysAreAccountsApart: without an injected key each
// client's key is its own account at the provider. One key's spent quota
// (the provider says remaining 0 and refuses it) must not make Sluice
// refuse another key's requests; the spent key itself is refused by
// Sluice at once, with a Retry-After, without reaching the provider.
func TestPassthroughKeysAreAccountsApart(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	up := newProgUpstream(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		key := string(ctx.Request.Header.Peek("Authorization"))
		mu.Lock()
		seen[key]++
		mu.Unlock()
		if key == "Bearer spent" {
			accountRefusal(ctx)
			return
		}
		accountAnswer(ctx)
	})
	s := startSluice(t, testConfig(up.url(), noRetries))
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"
	if resp := accountRequest(t, c, url, "spent", "m"); resp.StatusCode != 429 {
		t.Fatalf("spent key: status %d, want the provider's 429", resp.StatusCode)
	}
	for i := range 10 {
		if resp := accountRequest(t, c, url, "other", "m"); resp.StatusCode != 200 {
			t.Fatalf("other key, request %d: status %d (%s=%q), want 200: another account's quota refused it",
				i, resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected))
		}
	}
	resp := accountRequest(t, c, url, "spent", "m")
	if resp.StatusCode != 429 || resp.Header.Get(HeaderRejected) == "" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("spent key again: status %d %s=%q Retry-After %q; want Sluice's own 429 with a Retry-After",
			resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected), resp.Header.Get("Retry-After"))
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["Bearer spent"] != 1 || seen["Bearer other"] != 10 {
		t.Fatalf("provider saw %v; want the spent key once, the other ten times", seen)
	}
}

// TestAccountRefusalsLeaveTheSharedLimit: an account's rate-limit refusals
// (429 with its rate-limit headers) and their Retry-After describe that
// account's quota, not the provider's capacity: five of them, in flight
// together, neither cut the provider's shared limit nor freeze its growth.
func TestAccountRefusalsLeaveTheSharedLimit(t *testing.T) {
	t.Parallel()
	const n = 5
	var arrived sync.WaitGroup
	arrived.Add(n)
	up := newProgUpstream(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		arrived.Done()
		waitTimeout(&arrived, 5*time.Second)
		accountRefusal(ctx)
	})
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Algorithm, p.Limit.Ceiling, p.Limit.Initial, p.Limit.Cooldown = settings.AlgorithmAIMD, 20, 20, 0
		noRetries(p)
	}))
	lim := s.srv.limiters.Limiter("fake")
	before := lim.Stats().Limit
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			codes[i] = accountRequest(t, httpClient(), s.base+"/fake/v1/chat/completions", "spent", "m").StatusCode
		})
	}
	wg.Wait()
	for i, code := range codes {
		if code != 429 {
			t.Fatalf("request %d: status %d, want the provider's 429", i, code)
		}
	}
	testutil.Eventually(t, "permits released", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 })
	st := lim.Stats()
	if st.Limit != before || !st.Controller.FrozenUntil.IsZero() {
		t.Fatalf("after %d account refusals: limit %d -> %d, frozen until %v; want unchanged, not frozen",
			n, before, st.Limit, st.Controller.FrozenUntil)
	}
}

// TestModelsApartOnOneKey: providers count per model and report the
// bucket of the model that answered. With one injected key, a large
// model's spent quota must not refuse a small model's requests.
func TestModelsApartOnOneKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	up := newProgUpstream(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		big := strings.Contains(string(ctx.Request.Body()), `"model":"big"`)
		mu.Lock()
		seen[string(ctx.Request.Header.Peek("Authorization"))]++
		mu.Unlock()
		if big {
			accountRefusal(ctx)
			return
		}
		accountAnswer(ctx)
	})
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.APIKey = "injected"
		noRetries(p)
	}))
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"
	if resp := accountRequest(t, c, url, "", "big"); resp.StatusCode != 429 {
		t.Fatalf("big model: status %d, want the provider's 429", resp.StatusCode)
	}
	for i := range 10 {
		if resp := accountRequest(t, c, url, "", "small"); resp.StatusCode != 200 {
			t.Fatalf("small model, request %d: status %d (%s=%q), want 200: the big model's quota refused it",
				i, resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected))
		}
	}
	if resp := accountRequest(t, c, url, "", "big"); resp.StatusCode != 429 || resp.Header.Get(HeaderRejected) == "" {
		t.Fatalf("big model again: status %d %s=%q; want Sluice's own 429", resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected))
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["Bearer injected"] != 12-1 {
		t.Fatalf("provider saw %v; want 11 requests, all with the injected key", seen)
	}
}

// waitTimeout waits for wg, at most d.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// TestAccountFloodKeepsSpentAccount: a flood of new client keys into a
// full table of accounts neither evicts an account in use (its spent
// quota keeps refusing it) nor limits the new keys by anyone's quota.
func TestAccountFloodKeepsSpentAccount(t *testing.T) {
	t.Parallel()
	up := newProgUpstream(t, func(_ int64, ctx *fasthttp.RequestCtx) {
		if string(ctx.Request.Header.Peek("Authorization")) == "Bearer spent" {
			accountRefusal(ctx)
			return
		}
		accountAnswer(ctx)
	})
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Rate.MaxAccounts = 2
		noRetries(p)
	}))
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"
	if resp := accountRequest(t, c, url, "spent", "m"); resp.StatusCode != 429 {
		t.Fatalf("spent key: status %d, want the provider's 429", resp.StatusCode)
	}
	for i := range 20 {
		if resp := accountRequest(t, c, url, fmt.Sprintf("flood-%d", i), "m"); resp.StatusCode != 200 {
			t.Fatalf("new key %d: status %d (%s=%q), want 200", i, resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected))
		}
	}
	if resp := accountRequest(t, c, url, "spent", "m"); resp.StatusCode != 429 || resp.Header.Get(HeaderRejected) == "" {
		t.Fatalf("spent key after the flood: status %d %s=%q; want Sluice's own 429: its quota was forgotten",
			resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected))
	}
	st := s.srv.Providers()[0].Upstreams[0].Accounts
	if st.Accounts != 2 || st.Overflow == 0 {
		t.Fatalf("accounts %+v: want the table full (2) and the flood's overflow counted", st)
	}
}
