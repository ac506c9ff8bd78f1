package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// startSluiceWith is startSluice with options (metrics, tracing).
func startSluiceWith(t *testing.T, cfg *config.Config, opts Options) *sluiceUnderTest {
	t.Helper()
	s := New(opts)
	if err := s.Apply(cfg); err != nil {
		t.Fatalf("apply: %v", err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fs := NewFastHTTPServer(s)
	go fs.Serve(ln) //nolint:errcheck
	u := &sluiceUnderTest{srv: s, fs: fs, ln: ln, base: "http://" + ln.Addr().String()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = fs.ShutdownWithContext(ctx)
		s.CutStreams()
		s.Close()
	})
	return u
}

// newTestMetrics returns Metrics on a fresh registry.
func newTestMetrics(t testing.TB) *Metrics {
	m, _ := newTestMetricsReg(t)
	return m
}

// newTestMetricsReg returns Metrics and the registry they are on.
func newTestMetricsReg(t testing.TB) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// scraped is a registry's metrics, as /metrics would serve them.
type scraped struct {
	raw []byte
	mfs map[string]*dto.MetricFamily
}

func scrape(t *testing.T, reg *prometheus.Registry) scraped {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for _, mf := range fams {
		if _, err := expfmt.MetricFamilyToText(&buf, mf); err != nil {
			t.Fatal(err)
		}
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("parse metrics: %v\n%s", err, buf.Bytes())
	}
	return scraped{raw: buf.Bytes(), mfs: mfs}
}

// value returns the sample of name whose labels include want; for
// histograms the observation count. It fails the test when absent.
func (s scraped) value(t *testing.T, name string, want ...string) float64 {
	t.Helper()
	v, ok := s.lookup(name, want...)
	if !ok {
		t.Fatalf("no sample %s%v", name, want)
	}
	return v
}

// lookup returns the sum over the samples of name whose labels include
// want (a label not named, such as a queue class, is summed over); for
// histograms the observation count.
func (s scraped) lookup(name string, want ...string) (float64, bool) {
	mf := s.mfs[name]
	if mf == nil {
		return 0, false
	}
	sum, found := 0.0, false
next:
	for _, m := range mf.Metric {
		for i := 0; i+1 < len(want); i += 2 {
			match := false
			for _, lp := range m.Label {
				if lp.GetName() == want[i] && lp.GetValue() == want[i+1] {
					match = true
				}
			}
			if !match {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		default:
			continue
		}
		found = true
	}
	return sum, found
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

// TestMetricsScrape drives streams, a JSON answer, upstream 429s, queue
// rejections and an unknown route through Sluice, then checks the scraped
// /metrics: counts per outcome, in-flight and queue back to 0, histogram
// counts equal to the requests they describe, token counts, and promlint.
func TestMetricsScrape(t *testing.T) {
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = 2, 2
		p.Queue.MaxWaiting = 1
		p.Queue.MaxWait = 400 * time.Millisecond
	})
	m, reg := newTestMetricsReg(t)
	s := startSluiceWith(t, cfg, Options{Metrics: m})
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"

	const streams, events, upstream429, jsonAnswers = 5, 3, 3, 2
	for i := 0; i < streams; i++ {
		resp := post(t, c, url, map[string]string{"x-events": fmt.Sprint(events)})
		if body := readAll(t, resp); resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
			t.Fatalf("stream %d: %d %q", i, resp.StatusCode, body)
		}
	}
	for i := 0; i < upstream429; i++ {
		resp := post(t, c, url, map[string]string{"x-status": "429"})
		if readAll(t, resp); resp.StatusCode != 429 || resp.Header.Get(HeaderRejected) != "" {
			t.Fatalf("upstream 429 %d: status %d", i, resp.StatusCode)
		}
	}
	for i := 0; i < jsonAnswers; i++ {
		resp := post(t, c, url, map[string]string{"x-json": "1"})
		if readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("json %d: status %d", i, resp.StatusCode)
		}
	}

	// Fill both permits with slow streams, queue one request (it times
	// out) and overflow the queue with another (rejected at once).
	// The long streams hold the permits (~1 s) well past the queued
	// request's max_wait.
	const long, longEvents = 2, 12
	var wg sync.WaitGroup
	longBodies := make(chan *http.Response, long)
	for i := 0; i < long; i++ {
		resp := post(t, c, url, map[string]string{"x-events": fmt.Sprint(longEvents), "x-gap": "80ms"})
		longBodies <- resp
	}
	lim := s.srv.limiters.Limiter("fake")
	testutil.Eventually(t, "both permits in use", 2*time.Second, func() bool { return lim.Stats().Inflight == 2 })
	wg.Add(1)
	var queuedStatus int
	go func() {
		defer wg.Done()
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
		resp, err := c.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		readAll(t, resp)
		queuedStatus = resp.StatusCode
	}()
	testutil.Eventually(t, "one queued", 2*time.Second, func() bool { return lim.Stats().Waiting == 1 })
	resp := post(t, c, url, nil)
	if readAll(t, resp); resp.StatusCode != 503 || resp.Header.Get(HeaderRejected) != "queue_full" {
		t.Fatalf("queue overflow: %d %q", resp.StatusCode, resp.Header.Get(HeaderRejected))
	}
	wg.Wait()
	if queuedStatus != 503 {
		t.Fatalf("queued request: status %d, want 503 queue_timeout", queuedStatus)
	}
	close(longBodies)
	for resp := range longBodies {
		if body := readAll(t, resp); !strings.Contains(body, "[DONE]") {
			t.Fatalf("long stream truncated: %q", body)
		}
	}
	// An unknown route.
	readAll(t, post(t, c, s.base+"/nowhere/v1/chat/completions", nil))

	admitted := float64(streams + upstream429 + jsonAnswers + long)
	okResponses := float64(streams + jsonAnswers + long)
	streamed := float64(streams + long)
	// A request's metrics are recorded at its end, which its client may
	// see a moment before: wait until every request is counted.
	testutil.Eventually(t, "permits released and every request counted", 2*time.Second, func() bool {
		sc := scrape(t, reg)
		d, _ := sc.lookup("sluice_request_duration_seconds", "provider", "fake")
		tpot, _ := sc.lookup("sluice_time_per_output_token_seconds", "provider", "fake")
		return lim.Stats().Inflight == 0 && d >= admitted && tpot >= streamed
	})
	sc := scrape(t, reg)
	checks := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_requests_total", []string{"provider", "fake", "end", "complete"}, admitted},
		{"sluice_requests_total", []string{"provider", "fake", "end", "client_gone"}, 0},
		{"sluice_rejected_requests_total", []string{"provider", "fake", "reason", "queue_full", "class", "standard"}, 1},
		{"sluice_rejected_requests_total", []string{"provider", "fake", "reason", "queue_timeout", "class", "standard"}, 1},
		{"sluice_rejected_requests_total", []string{"provider", "fake", "reason", "client_gone", "class", "standard"}, 0},
		{"sluice_upstream_responses_total", []string{"provider", "fake", "class", "2xx"}, okResponses},
		{"sluice_upstream_responses_total", []string{"provider", "fake", "class", "4xx"}, upstream429},
		{"sluice_upstream_responses_total", []string{"provider", "fake", "class", "5xx"}, 0},
		{"sluice_unrouted_requests_total", nil, 1},
		// Histogram counts: one observation per request they describe.
		{"sluice_queue_wait_seconds", []string{"provider", "fake", "class", "standard"}, admitted},
		{"sluice_request_duration_seconds", []string{"provider", "fake"}, admitted},
		{"sluice_time_to_first_token_seconds", []string{"provider", "fake"}, streamed},
		{"sluice_time_per_output_token_seconds", []string{"provider", "fake"}, streamed},
		// Output: stream deltas (no usage in the fake's streams) and the
		// JSON answers' usage (1 each).
		{"sluice_tokens_total", []string{"provider", "fake", "model", "m", "type", "output"}, streams*events + long*longEvents + jsonAnswers*1},
	}
	for _, ck := range checks {
		if got := sc.value(t, ck.name, ck.labels...); got != ck.want {
			t.Errorf("%s%v = %v, want %v", ck.name, ck.labels, got, ck.want)
		}
	}
	// Input: the JSON answers report 3 prompt tokens each; streams carry no
	// usage and count Sluice's estimate.
	est := feedback.InspectRequest([]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)).PromptTokens
	if got, want := sc.value(t, "sluice_tokens_total", "model", "m", "type", "input"), float64((streams+long)*est+jsonAnswers*3); got != want {
		t.Errorf("input tokens = %v, want %v", got, want)
	}
	// Queue wait: one request waited ~0 (the fast path), and the sum stays
	// small since nobody was admitted after waiting.
	if mf := sc.mfs["sluice_queue_wait_seconds"]; mf.Metric[0].Histogram.GetSampleSum() > 0.1 {
		t.Errorf("queue wait sum = %v", mf.Metric[0].Histogram.GetSampleSum())
	}
	// The limiter agrees (the admin package exports these at scrape time).
	ls := lim.Stats()
	if ls.Inflight != 0 || ls.Waiting != 0 || ls.Admitted != uint64(admitted) || ls.Limit != 2 || ls.Binding != "fixed" ||
		ls.Drops[control.DropRateLimit] != upstream429 || ls.Drops[control.DropOverloaded] != 0 {
		t.Errorf("limiter stats %+v", ls)
	}
	// TTFT buckets span 10 ms .. 60 s.
	b := sc.mfs["sluice_time_to_first_token_seconds"].Metric[0].Histogram.Bucket
	if len(b) > 0 && math.IsInf(b[len(b)-1].GetUpperBound(), 1) {
		b = b[:len(b)-1]
	}
	if lo, hi := b[0].GetUpperBound(), b[len(b)-1].GetUpperBound(); lo != 0.01 || hi != 60 {
		t.Errorf("TTFT buckets %v .. %v, want 0.01 .. 60", lo, hi)
	}

	problems, err := promlint.New(bytes.NewReader(sc.raw)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "sluice_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
}

// Every sluice_ metric name is listed in docs/observability.md.
func TestMetricsDocumented(t *testing.T) {
	doc, err := readRepoFile("docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	m, reg := newTestMetricsReg(t)
	s := New(Options{Metrics: m})
	if err := s.Apply(testConfig("http://127.0.0.1:1", func(p *config.Provider) { p.Limit.Algorithm = settings.AlgorithmGradient2 })); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Touch the lazily created series.
	pm := m.forProvider("fake")
	pm.modelTokens("m", time.Now())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "sluice_") {
			continue
		}
		n++
		if !strings.Contains(doc, "`"+name+"`") {
			t.Errorf("%s is not documented in docs/observability.md", name)
		}
	}
	if n < 9 {
		t.Errorf("only %d sluice_ metrics gathered", n)
	}
}

func TestMetricsReloadAndRemovedProvider(t *testing.T) {
	m, reg := newTestMetricsReg(t)
	s := New(Options{Metrics: m})
	defer s.Close()
	two := testConfig("http://127.0.0.1:1", nil)
	p2 := two.Providers[0]
	p2.Name, p2.Match.PathPrefix = "other", "/other"
	two.Providers = append(two.Providers, p2)
	if err := s.Apply(two); err != nil {
		t.Fatal(err)
	}
	kept := m.forProvider("fake")
	kept.outcomes[outComplete].Inc()
	if got := testutilCount(t, reg, "sluice_requests_total", "other"); got == 0 {
		t.Fatal("provider other has no series")
	}
	if err := s.Apply(testConfig("http://127.0.0.1:1", nil)); err != nil {
		t.Fatal(err)
	}
	if got := testutilCount(t, reg, "sluice_requests_total", "other"); got != 0 {
		t.Errorf("removed provider still has %d series", got)
	}
	if m.forProvider("fake") != kept {
		t.Error("a kept provider got new handles on reload")
	}
}

func testutilCount(t *testing.T, reg *prometheus.Registry, name, provider string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mm := range mf.Metric {
			for _, l := range mm.Label {
				if l.GetName() == "provider" && l.GetValue() == provider {
					n++
				}
			}
		}
	}
	return n
}

func TestModelLabelIsBounded(t *testing.T) {
	t.Parallel()
	m, reg := newTestMetricsReg(t)
	pm := m.forProvider("p")
	now := time.Now()
	if u1, u2 := pm.modelTokens("", now), pm.modelTokens("", now); u1 != u2 || u1 == pm.other {
		t.Fatal("empty model should map to one 'unknown' entry")
	}
	if pm.modelTokens("bad\xff", now) != pm.other || pm.modelTokens(strings.Repeat("x", 200), now) != pm.other {
		t.Fatal("invalid or long model names must count as other")
	}
	// Names that come and go, each a few times: the table and the series
	// stay bounded whatever the churn.
	for i := 0; i < 20*maxModelsPerProvider; i++ {
		for range 1 + i%(2*modelDisplaceAfter) {
			pm.modelTokens(fmt.Sprintf("model-%d", i), now).out.Inc()
		}
	}
	if n := len(*pm.models.Load()); n != maxModelsPerProvider {
		t.Fatalf("%d models tracked, want %d", n, maxModelsPerProvider)
	}
	if n := len(pm.candidates); n > maxModelCandidates {
		t.Fatalf("%d names waiting for a place, want at most %d", n, maxModelCandidates)
	}
	// One series per model and type, plus other and unknown.
	if got := testutilCount(t, reg, "sluice_tokens_total", "p"); got != 2*(maxModelsPerProvider+2) {
		t.Fatalf("%d token series for one provider, want %d", got, 2*(maxModelsPerProvider+2))
	}
	// Known models are found without taking the lock.
	for name := range *pm.models.Load() {
		if m1, m2 := pm.modelTokens(name, now), pm.modelTokens(name, now); m1 != m2 || m1 == pm.other {
			t.Fatalf("%s: same model, different counters", name)
		}
	}
	if pm.modelTokens("model-new", now) != pm.other {
		t.Fatal("a name seen once takes a place from names with more answers")
	}
}

// Names sent early, one answer each, take every place in the model label's
// table; a real model that comes later gets its own series after a few
// answers all the same, and names sent once each after that never take it
// away.
func TestModelLabelNotTakenByEarlyNames(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	m, reg := newTestMetricsReg(t)
	s := startSluiceWith(t, testConfig(up.url(), nil), Options{Metrics: m})
	c := httpClient()
	ask := func(model string) {
		t.Helper()
		req, _ := http.NewRequest("POST", s.base+"/fake/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-json", "1")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if readAll(t, resp); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", model, resp.StatusCode)
		}
	}
	junk := 0
	for ; junk < 64; junk++ {
		ask(fmt.Sprintf("junk-%d", junk))
	}
	const real = "gpt-real"
	for range 10 {
		ask(real)
	}
	for range 200 {
		ask(fmt.Sprintf("junk-%d", junk))
		junk++
	}
	ask(real)
	// A request's metrics are recorded at its end, which its client may
	// see a moment before.
	testutil.Eventually(t, "the last answer counted", 2*time.Second, func() bool {
		n, _ := scrape(t, reg).lookup("sluice_request_duration_seconds", "provider", "fake")
		return n == float64(junk+11)
	})
	out, ok := scrape(t, reg).lookup("sluice_tokens_total", "provider", "fake", "model", real, "type", "output")
	if !ok || out < 1 {
		t.Fatalf("%s has no series of its own (output %v) after 64 names sent first", real, out)
	}
	if n := testutilCount(t, reg, "sluice_tokens_total", "fake"); n > 2*(maxModelsPerProvider+1) {
		t.Fatalf("%d token series for one provider", n)
	}
}

// A model that stops being used gives its place up to one that is used,
// once its answers have left the window; one still in use keeps it.
func TestIdleModelGivesUpItsPlace(t *testing.T) {
	t.Parallel()
	m, _ := newTestMetricsReg(t)
	pm := m.forProvider("p")
	now := time.Now()
	for i := range maxModelsPerProvider {
		for range 100 {
			pm.modelTokens(fmt.Sprintf("busy-%d", i), now)
		}
	}
	// Every place holds a model with many answers: a new one with a few
	// does not displace any.
	for range 2 * modelDisplaceAfter {
		if pm.modelTokens("new", now) != pm.other {
			t.Fatal("a new model displaced a busier one")
		}
	}
	// Two windows later only busy-0 is still used: the new model takes
	// the place of one of the others, not busy-0's.
	for range 2 {
		now = now.Add(modelWindow)
		pm.modelTokens("busy-0", now)
	}
	var got *modelTokens
	for range modelDisplaceAfter {
		got = pm.modelTokens("new", now)
	}
	if got == pm.other {
		t.Fatal("a model in use got no place from idle ones")
	}
	if pm.modelTokens("busy-0", now) == pm.other {
		t.Fatal("the model still in use lost its place")
	}
	if n := len(*pm.models.Load()); n != maxModelsPerProvider {
		t.Fatalf("%d models tracked, want %d", n, maxModelsPerProvider)
	}
}

// The request path must not allocate for metrics, nor for tracing when the
// request is not sampled: the handler allocates as much per request with
// them on as with them off.
func TestTelemetryAllocations(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation counts are checked without -short and -race")
	}
	up := newFakeUpstream(t)
	run := func(opts Options, kind string) float64 {
		s := New(opts)
		if err := s.Apply(testConfig(up.url(), nil)); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var ctx fasthttp.RequestCtx
		hdr := []string{"x-json", "1"}
		if kind != "json" {
			hdr = []string{"x-events", "3", "x-gap", "0s"}
		}
		one := func() { serveOnce(t, s, &ctx, hdr...) }
		for i := 0; i < 50; i++ {
			one()
		}
		return testing.AllocsPerRun(300, one)
	}
	never := NewTracerProvider(sdktrace.ParentBased(sdktrace.NeverSample()))
	defer func() { _ = never.Shutdown(context.Background()) }()
	for _, kind := range []string{"json", "sse"} {
		off := run(Options{}, kind)
		on := run(Options{Metrics: newTestMetrics(t)}, kind)
		unsampled := run(Options{Metrics: newTestMetrics(t), TracerProvider: never}, kind)
		t.Logf("%s: allocs/request: telemetry off %.1f, metrics %.1f, metrics + tracing not sampled %.1f", kind, off, on, unsampled)
		// AllocsPerRun rounds down an average; allow the noise of the fake
		// upstream's goroutines.
		if math.Abs(on-off) > 1 {
			t.Errorf("%s: metrics cost %.1f allocations per request (off %.1f, on %.1f)", kind, on-off, off, on)
		}
		if math.Abs(unsampled-off) > 1 {
			t.Errorf("%s: unsampled tracing costs %.1f allocations per request (off %.1f, on %.1f)", kind, unsampled-off, off, unsampled)
		}
	}
}

// readRepoFile reads a file by its path from the repository root (tests
// run in proxy/).
func readRepoFile(rel string) (string, error) {
	b, err := os.ReadFile(filepath.Join("..", rel))
	return string(b), err
}
