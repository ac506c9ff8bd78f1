package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// /admin/status reports, per provider, the algorithm, the effective limit
// and its parts, in flight, queued, TTFT median and token rate, the last
// drop with its reason and a Retry-After freeze.
func TestAdminStatusJSON(t *testing.T) {
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Algorithm = config.AlgorithmGradient2
		p.Limit.Ceiling, p.Limit.Initial, p.Limit.Min = 20, 10, 2
	})
	s, admin := startSluiceWith(t, cfg, Options{})
	readAll(t, post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{"x-status": "429", "x-retry-after": "30"}))

	var raw map[string]any
	getJSON(t, admin+"/admin/status", &raw)
	provs := raw["providers"].([]any)
	p := provs[0].(map[string]any)
	for _, k := range []string{"name", "algorithm", "limit", "components", "binding", "inflight", "queued",
		"ttft_median_seconds", "token_rate", "last_drop", "last_drop_reason", "frozen_until"} {
		if _, ok := p[k]; !ok {
			t.Errorf("/admin/status: provider has no %q: %v", k, p)
		}
	}
	var rep StatusReport
	getJSON(t, admin+"/admin/status", &rep)
	v := rep.Providers[0]
	if v.Name != "fake" || v.Algorithm != "gradient2" || v.LastDropReason != "rate_limit" || v.FrozenUntil == nil {
		t.Errorf("status %+v", v)
	}
	if until := time.Until(*v.FrozenUntil); until < 20*time.Second || until > 31*time.Second {
		t.Errorf("frozen for %v, want about 30s", until)
	}
	if v.Components.Delay == nil || v.Components.Loss == nil || v.Components.Ceiling != 20 || v.Components.Min != 2 {
		t.Errorf("components %+v", v.Components)
	}
	if v.Limit < 2 || v.Limit > 20 || v.Inflight != 0 || v.Queued != 0 || v.Binding == "" {
		t.Errorf("limit %d, inflight %d, queued %d, binding %q", v.Limit, v.Inflight, v.Queued, v.Binding)
	}
}

func TestStatusPageAndHistory(t *testing.T) {
	up := newFakeUpstream(t)
	s, admin := startSluiceWith(t, testConfig(up.url(), nil), Options{})

	resp, err := http.Get(admin + "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/admin/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(string(page), "/admin/status") {
		t.Error("page does not poll /admin/status")
	}
	// Served from the binary: no external script, style, font or image.
	if ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(string(page)); ext != "" {
		t.Errorf("page references an external asset: %s", ext)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}

	sp := NewStatusPage(s.srv, 3)
	for i := 0; i < 5; i++ {
		sp.Sample()
	}
	h := sp.hist["fake"]
	if h == nil || len(h.T) != 3 || len(h.Limit) != 3 || h.Limit[2] != 4 {
		t.Fatalf("history %+v, want 3 samples of limit 4", h)
	}
	// The admin listener's own page has a history endpoint.
	var hist struct {
		Providers map[string]series `json:"providers"`
	}
	getJSON(t, admin+"/admin/history", &hist)
	if hist.Providers == nil {
		t.Error("/admin/history has no providers object")
	}
	// No /metrics when metrics are off.
	resp, err = http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("/metrics with metrics off: %d", resp.StatusCode)
	}
}
