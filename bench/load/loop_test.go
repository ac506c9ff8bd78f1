package load

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// refuseAll answers every request as a Sluice queue refusal.
func refuseAll(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("X-Sluice-Rejected", "queue_full")
	ctx.SetStatusCode(503)
}

// TestRefusalPause: a closed-loop client without think time or SDK
// retries pauses after a refused call, unless told to spin.
func TestRefusalPause(t *testing.T) {
	t.Parallel()
	base := serve(t, refuseAll)
	run := func(pause time.Duration) Summary {
		res, err := Run(context.Background(), Config{
			URL: base + "/v1/chat/completions", Stream: true, RefusalPause: pause,
			Clients: 2, Duration: 300 * time.Millisecond, Prompt: Dist{Mean: 10}, Output: Dist{Mean: 2},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.Summary()
	}
	// 300 ms / 40 ms: at most 8 calls a client.
	if s := run(40 * time.Millisecond); s.Requests < 2 || s.Requests > 18 || s.RejectedSluice != s.Requests {
		t.Errorf("with a 40 ms pause: %d requests, %d refused", s.Requests, s.RejectedSluice)
	}
	// The raw hot loop: a refusal takes well under a millisecond on
	// loopback, so even a loaded machine under the race detector makes
	// far more than the paused run can.
	if s := run(0); s.Requests < 40 || s.RejectedSluice != s.Requests {
		t.Errorf("hot loop: only %d requests, %d refused", s.Requests, s.RejectedSluice)
	}
}

// TestClosedLoopThinkZero: with no think time a client sends its next call
// as soon as the previous one ends, never two at once.
func TestClosedLoopThinkZero(t *testing.T) {
	t.Parallel()
	base := serve(t, okStream)
	res, err := Run(context.Background(), Config{
		URL: base + "/v1/chat/completions", Stream: true, Clients: 3, Think: 0,
		Duration: 200 * time.Millisecond, Prompt: Dist{Mean: 10}, Output: Dist{Mean: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	by := map[int][]Call{}
	for _, c := range res.Calls {
		by[c.Client] = append(by[c.Client], c)
	}
	if len(by) != 3 {
		t.Fatalf("calls from %d clients", len(by))
	}
	for client, calls := range by {
		slices.SortFunc(calls, func(a, b Call) int { return int(a.Start - b.Start) })
		if len(calls) < 3 {
			t.Errorf("client %d made %d calls in 200 ms", client, len(calls))
		}
		for i := 1; i < len(calls); i++ {
			if calls[i].Start < calls[i-1].Start+calls[i-1].Total {
				t.Fatalf("client %d: call at %v before the previous ended (%v + %v)", client, calls[i].Start, calls[i-1].Start, calls[i-1].Total)
			}
		}
	}
}

func TestTenantShares(t *testing.T) {
	t.Parallel()
	count := func(tn tenants, n int, f func(int) int) []int {
		c := make([]int, len(tn.cum))
		for i := range n {
			c[f(i)]++
		}
		return c
	}
	even := newTenants(4, 0)
	if got := count(even, 40, func(i int) int { return even.client(i, 40) }); !slices.Equal(got, []int{10, 10, 10, 10}) {
		t.Errorf("40 clients over 4 tenants: %v", got)
	}
	skew := newTenants(3, 1) // shares 6/11, 3/11, 2/11
	if got := count(skew, 110, func(i int) int { return skew.client(i, 110) }); !slices.Equal(got, []int{60, 30, 20}) {
		t.Errorf("110 clients, skew 1: %v", got)
	}
	got := count(skew, 11000, skew.arrival)
	for k, want := range []int{6000, 3000, 2000} {
		if d := got[k] - want; d < -20 || d > 20 {
			t.Errorf("11000 arrivals, skew 1: %v", got)
		}
	}
	if (tenants{}).client(3, 10) != 0 || (tenants{}).arrival(7) != 0 {
		t.Error("no tenants: not tenant 0")
	}
}

// TestTenantsOpenLoopSDK sends open-loop SDK calls for three tenants
// through a server that refuses every first attempt: each call takes two
// attempts, and both carry the call's key, as the server checks.
func TestTenantsOpenLoopSDK(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			anthropic := strings.HasSuffix(path, "/messages")
			var mu sync.Mutex
			seen := map[string]int{} // key -> first attempts
			base := serve(t, func(ctx *fasthttp.RequestCtx) {
				h := &ctx.Request.Header
				key := string(h.Peek("x-api-key"))
				other := string(h.Peek("Authorization"))
				if !anthropic {
					key, other = strings.TrimPrefix(other, "Bearer "), key
					if !strings.HasPrefix(string(h.Peek("Authorization")), "Bearer ") {
						t.Errorf("Authorization %q", h.Peek("Authorization"))
					}
				}
				if !strings.HasPrefix(key, "sk-tenant-") || other != "" {
					t.Errorf("key %q, other credential %q", key, other)
				}
				if string(h.Peek("x-stainless-retry-count")) == "0" {
					mu.Lock()
					seen[key]++
					mu.Unlock()
					refuseAll(ctx)
					ctx.Response.Header.Set("Retry-After-Ms", "1")
					return
				}
				if anthropic {
					ctx.SetContentType("text/event-stream")
					ctx.SetBodyString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n" +
						"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
					return
				}
				okStream(ctx)
			})
			own := map[bool]string{false: "Authorization", true: "x-api-key"}[anthropic]
			res, err := Run(context.Background(), Config{
				URL: base + path, Stream: true, SDK: SDKOpenAI, Tenants: 3, TenantSkew: 1,
				Headers: map[string]string{own: "replaced by the tenant's key"},
				Rate:    300, Duration: 400 * time.Millisecond, Seed: 5, Prompt: Dist{Mean: 10}, Output: Dist{Mean: 2},
			})
			if err != nil {
				t.Fatal(err)
			}
			s := res.Summary()
			c := s.Calls
			if c.Calls < 5 || c.OK != c.Calls || c.Attempts[2] != c.Calls {
				t.Fatalf("calls %+v", c)
			}
			if len(s.Tenants) != 3 {
				t.Fatalf("tenants %+v", s.Tenants)
			}
			// Arrivals (cut or not) follow the shares 6/11, 3/11, 2/11 of
			// about 120.
			arrivals := make([]int, 3)
			for _, cl := range res.Calls {
				arrivals[cl.Tenant]++
			}
			if arrivals[0] <= arrivals[1] || arrivals[1] <= arrivals[2] || arrivals[2] == 0 {
				t.Errorf("skew 1: arrivals by tenant %v", arrivals)
			}
			mu.Lock()
			defer mu.Unlock()
			sum := 0
			for k, ts := range s.Tenants {
				sum += ts.Calls
				if ts.Key != TenantKey(k) || ts.OK != ts.Calls || ts.Requests < 2*ts.Calls || ts.RejectedSluice < ts.Calls || seen[ts.Key] < ts.Calls {
					t.Errorf("tenant %d: %+v, server saw %d first attempts", k, ts, seen[ts.Key])
				}
			}
			if sum != c.Calls || len(seen) != 3 {
				t.Errorf("%d calls over tenants of %d; server saw keys %v", sum, c.Calls, seen)
			}
		})
	}
}
