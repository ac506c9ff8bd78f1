package proxy

import (
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/settings"
)

func defaultFlowRules(mut func(q *settings.Queue)) *flowRules {
	q := config.DefaultProvider().Queue
	if mut != nil {
		mut(&q)
	}
	return newFlowRules(q)
}

// flowOf reads the flow of a request with headers h under rules fr, for a
// client of no clients: block (the default policy).
func flowOf(fr *flowRules, h *fasthttp.RequestHeader, info *feedback.Request) adaptive.Flow {
	var id identity
	newClientRules(settings.Clients{}).identify(h, &id)
	return fr.flow(h, info, &id, &providerPolicy{ceiling: fr.def, allowed: true})
}

func sha8(s string) uint64 {
	sum := sha256.Sum256([]byte(s))
	return binary.BigEndian.Uint64(sum[:8])
}

func TestFlowFromHeaders(t *testing.T) {
	t.Parallel()
	fr := defaultFlowRules(nil)
	teamRules := defaultFlowRules(func(q *settings.Queue) { q.TenantHeader, q.TenantHeaderTrusted = "X-Team", true })
	untrusted := defaultFlowRules(func(q *settings.Queue) { q.TenantHeader = "X-Team" })
	info := &feedback.Request{PromptTokens: 300, MaxTokens: 200}
	for _, tc := range []struct {
		name  string
		rules *flowRules
		hdr   []string
		info  *feedback.Request
		want  adaptive.Flow
	}{
		{"nothing: anonymous, default class, no output bound", fr, nil, &feedback.Request{PromptTokens: 10},
			adaptive.Flow{Prompt: 10}},
		{"bearer key", fr, []string{"Authorization", "Bearer sk-abc"}, info,
			adaptive.Flow{Tenant: sha8("sk-abc"), Prompt: 300, MaxOutput: 200}},
		{"bearer in any case", fr, []string{"Authorization", "bearer sk-abc"}, info,
			adaptive.Flow{Tenant: sha8("sk-abc"), Prompt: 300, MaxOutput: 200}},
		{"x-api-key", fr, []string{"x-api-key", "sk-ant-1"}, info,
			adaptive.Flow{Tenant: sha8("sk-ant-1"), Prompt: 300, MaxOutput: 200}},
		{"tenant header wins over the key", teamRules, []string{"X-Team", "search", "Authorization", "Bearer sk-abc"}, info,
			adaptive.Flow{Tenant: sha8("search"), Prompt: 300, MaxOutput: 200}},
		{"untrusted tenant header: the key", untrusted, []string{"X-Team", "search", "Authorization", "Bearer sk-abc"}, info,
			adaptive.Flow{Tenant: sha8("sk-abc"), Prompt: 300, MaxOutput: 200}},
		{"class above the default: the default", fr, []string{"X-Sluice-Class", "interactive"}, info,
			adaptive.Flow{Class: 2, Prompt: 300, MaxOutput: 200}},
		{"class in any case", fr, []string{"X-Sluice-Class", "Batch"}, info,
			adaptive.Flow{Class: 3, Prompt: 300, MaxOutput: 200}},
		{"unknown class: default", fr, []string{"X-Sluice-Class", "urgent!!"}, info,
			adaptive.Flow{Prompt: 300, MaxOutput: 200}},
		{"deadline", fr, []string{"X-Sluice-Max-Wait", "1500ms"}, info,
			adaptive.Flow{MaxWait: 1500 * time.Millisecond, Prompt: 300, MaxOutput: 200}},
		{"SDK timeout", fr, []string{"x-stainless-timeout", "600"}, info,
			adaptive.Flow{MaxWait: 600 * time.Second, Prompt: 300, MaxOutput: 200}},
		{"SDK read timeout (openai-python)", fr, []string{"x-stainless-read-timeout", "600.0"}, info,
			adaptive.Flow{MaxWait: 600 * time.Second, Prompt: 300, MaxOutput: 200}},
		{"SDK timeout not given", fr, []string{"x-stainless-timeout", "NOT_GIVEN"}, info,
			adaptive.Flow{Prompt: 300, MaxOutput: 200}},
		{"shortest of the client's timeouts", fr, []string{"x-stainless-read-timeout", "600.0", "X-Sluice-Max-Wait", "2s"}, info,
			adaptive.Flow{MaxWait: 2 * time.Second, Prompt: 300, MaxOutput: 200}},
		{"SDK retry", fr, []string{"x-stainless-retry-count", "2"}, info,
			adaptive.Flow{Retry: true, Prompt: 300, MaxOutput: 200}},
		{"SDK first attempt", fr, []string{"x-stainless-retry-count", "0"}, info,
			adaptive.Flow{Prompt: 300, MaxOutput: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				h.Set(tc.hdr[i], tc.hdr[i+1])
			}
			if got := flowOf(tc.rules, &h, tc.info); got != tc.want {
				t.Fatalf("flow = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseWait(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"2": 2 * time.Second, "0.25": 250 * time.Millisecond, "1500ms": 1500 * time.Millisecond,
		"3s": 3 * time.Second, "1m": time.Minute, "1.5s": 1500 * time.Millisecond,
		"": 0, "-1": 0, "s": 0, "2h": 0, "1e3": 0, "99999999999": 0,
	} {
		if got := parseWait([]byte(in)); got != want {
			t.Errorf("parseWait(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestFlowReadingDoesNotAllocate(t *testing.T) {
	fr := defaultFlowRules(nil)
	var h fasthttp.RequestHeader
	h.Set("Authorization", "Bearer sk-0123456789abcdef0123456789abcdef")
	h.Set("X-Sluice-Class", "Interactive")
	h.Set("X-Sluice-Max-Wait", "2.5s")
	h.Set("x-stainless-read-timeout", "600.0")
	h.Set("x-stainless-retry-count", "1")
	info := &feedback.Request{PromptTokens: 100, MaxTokens: 50}
	cr := newClientRules(settings.Clients{})
	pp := &providerPolicy{ceiling: fr.def, allowed: true}
	var id identity
	if n := testing.AllocsPerRun(100, func() {
		cr.identify(&h, &id)
		_ = fr.flow(&h, info, &id, pp)
	}); n != 0 {
		t.Fatalf("reading a flow allocates %v times", n)
	}
}

// TestRefusalsSayWhoIsOut: with batch capped at half of 2 permits and no
// queue, a second batch request is refused 429 over_share (the provider
// still has a permit), and once the provider is full a request is refused
// 503 queue_full. Both carry Retry-After and retry-after-ms from the
// queue's estimate, once a permit has ended and there is one; the
// message points at Retry-After only then, and says to back off before.
func TestRefusalsSayWhoIsOut(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = 2, 2
		p.Queue.MaxWaiting = 0
		p.Queue.Classes[2].MaxShare, p.Queue.Classes[2].SaturatedShare = 0.5, 0.5
	}))
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"
	check := func(hdr map[string]string, status int, reason string, retryAfter bool) {
		t.Helper()
		resp := post(t, c, url, hdr)
		body := readAll(t, resp)
		ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		ms, _ := strconv.Atoi(resp.Header.Get("Retry-After-Ms"))
		if resp.StatusCode != status || resp.Header.Get(HeaderRejected) != reason || (ra >= 1 && ms >= 1) != retryAfter {
			t.Fatalf("status %d %s=%q Retry-After %q retry-after-ms %q, want %d %q (Retry-After: %v)",
				resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected),
				resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"), status, reason, retryAfter)
		}
		hint := map[bool]string{false: hintBackoff, true: hintRetryAfter}[retryAfter]
		if !strings.Contains(body, hint) || strings.Contains(body, "Retry-After") != retryAfter {
			t.Fatalf("%s (Retry-After: %v): message %s, want it to say %q", reason, retryAfter, body, hint)
		}
	}
	batch := map[string]string{"X-Sluice-Class": "batch"}
	first := post(t, c, url, map[string]string{"x-events": "20", "x-gap": "50ms", "X-Sluice-Class": "batch"})
	defer first.Body.Close()
	// No permit has ended: no estimate, no Retry-After (clients back off
	// on their own rather than be told a made-up delay).
	check(batch, http.StatusTooManyRequests, "over_share", false)
	done := post(t, c, url, map[string]string{"x-json": "1"})
	io.Copy(io.Discard, done.Body)
	done.Body.Close()
	check(batch, http.StatusTooManyRequests, "over_share", true)
	second := post(t, c, url, map[string]string{"x-events": "20", "x-gap": "50ms"})
	defer second.Body.Close()
	check(nil, http.StatusServiceUnavailable, "queue_full", true)
	if st := s.srv.limiters.Limiter("fake").Stats(); st.Classes[2].Rejected != 2 || st.Classes[1].Rejected != 1 {
		t.Fatalf("rejections by class: %+v", st.Classes)
	}
}

// Flow headers speak to Sluice only: the upstream never sees those in
// Sluice's namespace, nor the tenant header whatever its name (X-Team):
// it names a tenant of Sluice's queue, and may be forged by a client.
func TestOwnFlowHeadersAreNotForwarded(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) { p.Queue.TenantHeader = "X-Team" }))
	resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{
		"X-Sluice-Class": "batch", "X-Sluice-Max-Wait": "2s", "X-Team": "ml",
	})
	readAll(t, resp)
	up.mu.Lock()
	h := up.lastReq
	up.mu.Unlock()
	if h == nil {
		t.Fatal("the upstream saw no request")
	}
	for _, k := range []string{"X-Sluice-Class", "X-Sluice-Max-Wait", "X-Team"} {
		if v := h.Peek(k); len(v) > 0 {
			t.Errorf("upstream got %s: %q", k, v)
		}
	}
}
