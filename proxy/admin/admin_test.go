package admin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/settings"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// net/http's client keeps idle connection readers until they close.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		// fasthttp's janitors exit by themselves after an idle interval
		// longer than a test run.
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	)
}

// upstream is a minimal provider on loopback. Request headers steer it:
// x-status answers that status with an OpenAI rate-limit error body (and
// Retry-After from x-retry-after); x-hold keeps a stream open that long
// before its first event; otherwise it streams three events.
func upstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	srv := &fasthttp.Server{CloseOnShutdown: true, Handler: func(ctx *fasthttp.RequestCtx) {
		if st := ctx.Request.Header.Peek("x-status"); len(st) > 0 {
			var code int
			fmt.Sscan(string(st), &code)
			ctx.SetStatusCode(code)
			ctx.SetContentType("application/json")
			if ra := ctx.Request.Header.Peek("x-retry-after"); len(ra) > 0 {
				ctx.Response.Header.SetBytesV("Retry-After", ra)
			}
			ctx.SetBodyString(`{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		hold, _ := time.ParseDuration(string(ctx.Request.Header.Peek("x-hold")))
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			select {
			case <-time.After(hold):
			case <-stop:
			}
			for i := 0; i < 3; i++ {
				fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
				_ = w.Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
		})
	}}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() {
		close(stop)
		_ = srv.Shutdown()
	})
	return "http://" + ln.Addr().String()
}

// sluice runs a proxy for one provider "fake" in front of up, and an admin
// listener serving Handler with a registry holding the request metrics,
// the state collector and the reload metrics. It returns the proxy's and
// the admin listener's base URLs.
func sluice(t *testing.T, up string, mut func(*config.Provider)) (srv *proxy.Server, base, admin string, rel *Reloads) {
	t.Helper()
	reg := NewRegistry()
	m, err := proxy.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv = proxy.New(proxy.Options{Metrics: m})
	if rel, err = Register(reg, srv); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	p := config.DefaultProvider()
	p.Name, p.Upstream, p.Match.PathPrefix = "fake", up, "/fake"
	if mut != nil {
		mut(&p)
	}
	cfg.Providers = []config.Provider{p}
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	hist := NewHistory(srv, 3)
	fs := proxy.NewFastHTTPServer(srv)
	as := &fasthttp.Server{Handler: Handler(srv, Options{Registry: reg, History: hist})}
	ln, _ := net.Listen("tcp4", "127.0.0.1:0")
	aln, _ := net.Listen("tcp4", "127.0.0.1:0")
	go fs.Serve(ln)  //nolint:errcheck
	go as.Serve(aln) //nolint:errcheck
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = fs.ShutdownWithContext(ctx)
		_ = as.Shutdown()
		srv.CutStreams()
		srv.Close()
	})
	return srv, "http://" + ln.Addr().String(), "http://" + aln.Addr().String(), rel
}

func post(t *testing.T, url string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func drain(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

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

func scrape(t *testing.T, admin string) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw := []byte(drain(resp))
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return raw, mfs
}

// sample returns the value of name's sample whose labels include want.
func sample(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range mf.Metric {
		for i := 0; i+1 < len(want); i += 2 {
			found := false
			for _, lp := range m.Label {
				found = found || (lp.GetName() == want[i] && lp.GetValue() == want[i+1])
			}
			if !found {
				continue next
			}
		}
		if m.Counter != nil {
			return m.Counter.GetValue()
		}
		return m.Gauge.GetValue()
	}
	t.Fatalf("no sample %s%v", name, want)
	return 0
}

// TestMetricsFromLimiters: the limiter state is exported at scrape time:
// in flight while a stream runs, back to 0 after, drops by kind, the limit,
// its parts and what binds it, admissions; plus the reload metrics, the Go
// and process collectors, and promlint is clean.
func TestMetricsFromLimiters(t *testing.T) {
	up := upstream(t)
	srv, base, admin, rel := sluice(t, up, func(p *config.Provider) {
		p.Limit.Algorithm, p.Limit.Ceiling, p.Limit.Initial = settings.AlgorithmFixed, 3, 3
	})
	rel.Record(true, time.Unix(1700000000, 0))
	url := base + "/fake/v1/chat/completions"

	held := make(chan string, 1)
	go func() { held <- drain(post(t, url, "x-hold", "300ms")) }()
	testutil.Eventually(t, "a stream in flight", 5*time.Second, func() bool { return srv.Providers()[0].Limiter.Inflight == 1 })
	_, mid := scrape(t, admin)
	if v := sample(t, mid, "sluice_inflight_requests", "provider", "fake"); v != 1 {
		t.Errorf("sluice_inflight_requests while a stream runs = %v, want 1", v)
	}
	if body := <-held; !strings.Contains(body, "[DONE]") {
		t.Fatalf("stream: %q", body)
	}
	for i := 0; i < 2; i++ {
		if resp := post(t, url, "x-status", "429"); resp.StatusCode != 429 {
			t.Fatalf("upstream 429: got %d", resp.StatusCode)
		} else {
			drain(resp)
		}
	}
	testutil.Eventually(t, "permits released", 5*time.Second, func() bool { return srv.Providers()[0].Limiter.Inflight == 0 })
	raw, mfs := scrape(t, admin)
	for _, ck := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_inflight_requests", []string{"provider", "fake"}, 0},
		{"sluice_queued_requests", []string{"provider", "fake"}, 0},
		{"sluice_admitted_requests_total", []string{"provider", "fake"}, 3},
		{"sluice_drops_total", []string{"provider", "fake", "kind", "rate_limit"}, 2},
		{"sluice_drops_total", []string{"provider", "fake", "kind", "overloaded"}, 0},
		{"sluice_concurrency_limit", []string{"provider", "fake"}, 3},
		{"sluice_concurrency_limit_component", []string{"provider", "fake", "component", "ceiling"}, 3},
		{"sluice_concurrency_limit_binding", []string{"provider", "fake", "component", "fixed"}, 1},
		{"sluice_concurrency_limit_binding", []string{"provider", "fake", "component", "delay"}, 0},
		{"sluice_provider_info", []string{"provider", "fake", "algorithm", "fixed"}, 1},
		{"sluice_requests_total", []string{"provider", "fake", "end", "complete"}, 3},
		{"sluice_config_reload_success", nil, 1},
		{"sluice_config_last_reload_success_timestamp_seconds", nil, 1700000000},
		{"sluice_config_reloads_total", []string{"result", "success"}, 1},
	} {
		if got := sample(t, mfs, ck.name, ck.labels...); got != ck.want {
			t.Errorf("%s%v = %v, want %v", ck.name, ck.labels, got, ck.want)
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if mfs[name] == nil {
			t.Errorf("%s missing", name)
		}
	}
	problems, err := promlint.New(bytes.NewReader(raw)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "sluice_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	rel.Record(false, time.Now())
	if _, mfs := scrape(t, admin); sample(t, mfs, "sluice_config_reload_success") != 0 {
		t.Error("failed reload not recorded")
	}
}

// A provider removed by a reload disappears from the state metrics.
func TestRemovedProviderLeavesMetrics(t *testing.T) {
	srv, _, admin, _ := sluice(t, "http://127.0.0.1:1", nil)
	if _, mfs := scrape(t, admin); sample(t, mfs, "sluice_concurrency_limit", "provider", "fake") == 0 {
		t.Fatal("no limit exported for fake")
	}
	cfg := config.Default()
	p := config.DefaultProvider()
	p.Name, p.Upstream, p.Match.PathPrefix = "other", "http://127.0.0.1:1", "/other"
	cfg.Providers = []config.Provider{p}
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	_, mfs := scrape(t, admin)
	for _, m := range mfs["sluice_concurrency_limit"].Metric {
		for _, l := range m.Label {
			if l.GetValue() == "fake" {
				t.Error("removed provider still exported by the state collector")
			}
		}
	}
}

// /admin/status reports, per provider, the algorithm, the effective limit
// and its parts, in flight, queued, TTFT median and token rate, the last
// drop with its reason and a Retry-After freeze.
func TestAdminStatusJSON(t *testing.T) {
	up := upstream(t)
	_, base, admin, _ := sluice(t, up, func(p *config.Provider) {
		p.Limit.Algorithm = settings.AlgorithmGradient2
		p.Limit.Ceiling, p.Limit.Initial, p.Limit.Min = 20, 10, 2
	})
	drain(post(t, base+"/fake/v1/chat/completions", "x-status", "429", "x-retry-after", "30"))

	var raw map[string]any
	getJSON(t, admin+"/admin/status", &raw)
	p := raw["providers"].([]any)[0].(map[string]any)
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

func TestHealthAndReady(t *testing.T) {
	srv, _, admin, _ := sluice(t, "http://127.0.0.1:1", nil)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/nope": 404} {
		resp, err := http.Get(admin + path)
		if err != nil {
			t.Fatal(err)
		}
		drain(resp)
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	srv.Drain()
	resp, err := http.Get(admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if drain(resp); resp.StatusCode != 503 {
		t.Errorf("/readyz while draining: %d, want 503", resp.StatusCode)
	}
}

func TestStatusPageAndHistory(t *testing.T) {
	srv, _, admin, _ := sluice(t, "http://127.0.0.1:1", func(p *config.Provider) {
		p.Limit.Algorithm, p.Limit.Ceiling, p.Limit.Initial = settings.AlgorithmFixed, 4, 4
	})
	resp, err := http.Get(admin + "/admin/")
	if err != nil {
		t.Fatal(err)
	}
	page := drain(resp)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/admin/: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !strings.Contains(page, "/admin/status") {
		t.Error("page does not poll /admin/status")
	}
	// Served from the binary: no external script, style, font or image.
	if ext := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(page); ext != "" {
		t.Errorf("page references an external asset: %s", ext)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("CSP %q", csp)
	}
	h := NewHistory(srv, 3)
	for i := 0; i < 5; i++ {
		h.Sample()
	}
	if s := h.hist["fake"]; s == nil || len(s.T) != 3 || len(s.Limit) != 3 || s.Limit[2] != 4 {
		t.Fatalf("history %+v, want 3 samples of limit 4", s)
	}
	var hist struct {
		Providers map[string]series `json:"providers"`
	}
	getJSON(t, admin+"/admin/history", &hist)
	if hist.Providers == nil {
		t.Error("/admin/history has no providers object")
	}
	// No /metrics, no history without them.
	bare := Handler(srv, Options{})
	for _, path := range []string{"/metrics", "/admin/history"} {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(path)
		bare(&ctx)
		if ctx.Response.StatusCode() != 404 {
			t.Errorf("%s without it configured: %d", path, ctx.Response.StatusCode())
		}
	}
}

// readRepoFile reads a file by its path from the repository root.
func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// gathered returns the names of the metrics a fully wired registry
// exports, lazily created series touched.
func gathered(t *testing.T) map[string]bool {
	t.Helper()
	srv, base, admin, rel := sluice(t, upstream(t), nil)
	rel.Record(true, time.Now())
	drain(post(t, base+"/fake/v1/chat/completions"))
	_, mfs := scrape(t, admin)
	_ = srv
	known := map[string]bool{}
	for name := range mfs {
		known[name] = true
	}
	return known
}

// Every sluice_ metric is listed in docs/observability.md, and the Grafana
// dashboard only queries metrics that exist.
func TestMetricsDocumentedAndDashboard(t *testing.T) {
	known := gathered(t)
	doc := readRepoFile(t, "docs/observability.md")
	n := 0
	for name := range known {
		if !strings.HasPrefix(name, "sluice_") {
			continue
		}
		n++
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("%s is not documented in docs/observability.md", name)
		}
	}
	if n < 20 {
		t.Errorf("only %d sluice_ metrics gathered", n)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(readRepoFile(t, "deploy/grafana/sluice.json")), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	re := regexp.MustCompile(`\b(sluice|go|process)_[a-z_]+\b`)
	refs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, ref := range re.FindAllString(tg.Expr, -1) {
				refs++
				if base := strings.TrimSuffix(ref, "_bucket"); !known[base] && !(needsSetup(base) && strings.Contains(doc, "`"+base+"`")) {
					t.Errorf("panel %q queries %s, which Sluice does not export", p.Title, ref)
				}
			}
		}
	}
	if refs < 20 {
		t.Errorf("only %d metric references in the dashboard", refs)
	}
}

// needsSetup reports whether a metric exists only with a setup this
// test's server lacks: a cluster block, a rate block, TLS on the listener
// (registered by cmd/sluice). The dashboard may query those when they are
// documented; deploy/tools/prometheus checks every panel against a real
// Prometheus scraping Sluice with that setup.
func needsSetup(name string) bool {
	for _, p := range []string{"sluice_cluster_", "sluice_rate_limit", "sluice_rate_remaining", "sluice_rate_window_seconds", "sluice_tls_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// TestAdmissionMetricsAndStatus: the rate layer, the upstreams and the
// retry policy are exported at scrape time and shown on /admin/status: a
// request that failed on upstream b (connection refused) and was retried
// on a is one attempt and one failure on b, one attempt and one failover
// on a, and one retry.
func TestAdmissionMetricsAndStatus(t *testing.T) {
	up := upstream(t)
	_, base, admin, _ := sluice(t, "", func(p *config.Provider) {
		p.Upstream = ""
		p.Upstreams = []config.Upstream{config.DefaultUpstream(), config.DefaultUpstream()}
		p.Upstreams[0].Name, p.Upstreams[0].URL = "b", "http://127.0.0.1:1"
		p.Upstreams[1].Name, p.Upstreams[1].URL = "a", up
		p.Rate.RPM = 100
		p.Retries.BackoffBase, p.Retries.BackoffMax = time.Millisecond, time.Millisecond
	})
	resp := post(t, base+"/fake/v1/chat/completions")
	if body := drain(resp); resp.StatusCode != 200 || resp.Header.Get(proxy.HeaderUpstream) != "a" || !strings.Contains(body, "[DONE]") {
		t.Fatalf("status %d, upstream %q", resp.StatusCode, resp.Header.Get(proxy.HeaderUpstream))
	}
	_, mfs := scrape(t, admin)
	for _, ck := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_rate_limit", []string{"scope", "provider", "dimension", "requests"}, 100},
		{"sluice_rate_remaining", []string{"scope", "provider", "dimension", "requests"}, 99},
		{"sluice_upstream_attempts_total", []string{"upstream", "b"}, 1},
		{"sluice_upstream_attempt_failures_total", []string{"upstream", "b"}, 1},
		{"sluice_upstream_attempts_total", []string{"upstream", "a"}, 1},
		{"sluice_upstream_failovers_total", []string{"upstream", "a"}, 1},
		{"sluice_upstream_breaker_state", []string{"upstream", "b", "state", "closed"}, 1},
		{"sluice_upstream_inflight_requests", []string{"upstream", "a"}, 0},
		{"sluice_retry_decisions_total", []string{"decision", "retried"}, 1},
		{"sluice_retry_budget_window", []string{"kind", "retries"}, 1},
	} {
		if got := sample(t, mfs, ck.name, ck.labels...); got != ck.want {
			t.Errorf("%s%v = %v, want %v", ck.name, ck.labels, got, ck.want)
		}
	}
	var rep StatusReport
	getJSON(t, admin+"/admin/status", &rep)
	v := rep.Providers[0]
	if len(v.Upstreams) != 2 || v.Upstreams[0].Name != "b" || v.Upstreams[0].Failures != 1 || v.Upstreams[1].Failovers != 1 ||
		v.Upstreams[1].URL != up || v.Upstreams[0].Breaker != "closed" {
		t.Errorf("upstreams %+v", v.Upstreams)
	}
	if v.Rate.Provider["requests"].Limit != 100 || v.Retries.Decisions["retried"] != 1 {
		t.Errorf("rate %+v, retries %+v", v.Rate, v.Retries)
	}
}
