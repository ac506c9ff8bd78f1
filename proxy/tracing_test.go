package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// genAIUpstream streams an OpenAI chat completion with a response model,
// a finish reason and usage, one event every gap, and records the trace
// headers it received.
type genAIUpstream struct {
	addr string
	gap  time.Duration

	mu          sync.Mutex
	traceparent string
	tracestate  string
	authz       string
}

func newGenAIUpstream(t *testing.T, gap time.Duration) *genAIUpstream {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &genAIUpstream{addr: "http://" + ln.Addr().String(), gap: gap}
	stop := make(chan struct{})
	srv := &fasthttp.Server{Logger: quietLogger{}, CloseOnShutdown: true, Handler: func(ctx *fasthttp.RequestCtx) {
		u.mu.Lock()
		u.traceparent = string(ctx.Request.Header.Peek("traceparent"))
		u.tracestate = string(ctx.Request.Header.Peek("tracestate"))
		u.authz = string(ctx.Request.Header.Peek("Authorization"))
		u.mu.Unlock()
		if len(ctx.Request.Header.Peek("x-status")) > 0 {
			ctx.SetStatusCode(529)
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.Response.ImmediateHeaderFlush = true
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			events := []string{
				`{"id":"c1","object":"chat.completion.chunk","model":"m-2024-01","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
				`{"id":"c1","object":"chat.completion.chunk","model":"m-2024-01","choices":[{"index":0,"delta":{"content":"hidden "}}]}`,
				`{"id":"c1","object":"chat.completion.chunk","model":"m-2024-01","choices":[{"index":0,"delta":{"content":"completion"}}]}`,
				`{"id":"c1","object":"chat.completion.chunk","model":"m-2024-01","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
				`{"id":"c1","object":"chat.completion.chunk","model":"m-2024-01","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":2,"total_tokens":13}}`,
			}
			for _, e := range events {
				if _, err := w.WriteString("data: " + e + "\n\n"); err != nil || w.Flush() != nil {
					return
				}
				select {
				case <-time.After(u.gap):
				case <-stop:
					return
				}
			}
			_, _ = w.WriteString("data: [DONE]\n\n")
			_ = w.Flush()
		})
	}}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { close(stop); _ = srv.Shutdown() })
	return u
}

func (u *genAIUpstream) headers() (tp, ts, authz string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.traceparent, u.tracestate, u.authz
}

func attrsOf(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID  = "00f067aa0ba902b7"
)

// TestTracingSpanTree sends a stream with a W3C traceparent and checks the
// exported spans: a server span child of the client's span, a client span
// per upstream attempt child of it, the traceparent the upstream received,
// the GenAI and Sluice attributes, the first-token event, and that the
// spans end when the stream ends, not when the handler returns.
//
// Both with a plain SDK provider (the SDK samples) and with Sluice's own
// TracerProvider (Sluice decides first).
func TestTracingSpanTree(t *testing.T) {
	for _, kind := range []string{"sdk", "sluice"} {
		t.Run(kind, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			var tp trace.TracerProvider
			if kind == "sdk" {
				p := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
				defer func() { _ = p.Shutdown(context.Background()) }()
				tp = p
			} else {
				p := NewTracerProvider(sdktrace.ParentBased(sdktrace.AlwaysSample()), sdktrace.WithSyncer(exp))
				defer func() { _ = p.Shutdown(context.Background()) }()
				tp = p
			}
			testSpanTree(t, tp, exp)
		})
	}
}

func testSpanTree(t *testing.T, tp trace.TracerProvider, exp *tracetest.InMemoryExporter) {
	const gap = 120 * time.Millisecond
	up := newGenAIUpstream(t, gap)
	s := startSluiceWith(t, testConfig(up.addr, nil), Options{TracerProvider: tp, Metrics: newTestMetrics(t)})

	body := `{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"top secret prompt"}]}`
	req, _ := http.NewRequest("POST", s.base+"/fake/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-very-secret")
	req.Header.Set("traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-01")
	req.Header.Set("tracestate", "vendor=abc")
	start := time.Now()
	resp, err := httpClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	// The handler has returned (headers and the first event are out), the
	// stream goes on: no span may have ended yet.
	time.Sleep(gap / 2)
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d span(s) ended while the stream was still running", n)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	streamEnd := time.Now()
	if !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream incomplete: %q", rest)
	}
	testutil.Eventually(t, "two spans exported", 2*time.Second, func() bool { return len(exp.GetSpans()) == 2 })

	var server, client sdktrace.ReadOnlySpan
	for _, ss := range exp.GetSpans().Snapshots() {
		switch ss.SpanKind() {
		case trace.SpanKindServer:
			server = ss
		case trace.SpanKindClient:
			client = ss
		}
	}
	if server == nil || client == nil {
		t.Fatalf("want one server and one client span, got %v", exp.GetSpans())
	}
	// Tree: client's span -> server span -> client (upstream) span.
	if got := server.SpanContext().TraceID().String(); got != clientTraceID {
		t.Errorf("server span trace %s, want the client's %s", got, clientTraceID)
	}
	if got := server.Parent().SpanID().String(); got != clientSpanID || !server.Parent().IsRemote() {
		t.Errorf("server span parent %s (remote %v), want the client's span %s", got, server.Parent().IsRemote(), clientSpanID)
	}
	if client.Parent().SpanID() != server.SpanContext().SpanID() || client.SpanContext().TraceID() != server.SpanContext().TraceID() {
		t.Errorf("client span is not a child of the server span")
	}
	if server.Name() != "proxy fake" || client.Name() != "chat m" {
		t.Errorf("span names %q, %q", server.Name(), client.Name())
	}
	// What the upstream received: the client span's context, and the
	// client's tracestate.
	tp0, ts0, authz := up.headers()
	if want := "00-" + clientTraceID + "-" + client.SpanContext().SpanID().String() + "-01"; tp0 != want {
		t.Errorf("upstream traceparent %q, want %q", tp0, want)
	}
	if ts0 != "vendor=abc" {
		t.Errorf("upstream tracestate %q", ts0)
	}
	if authz != "Bearer sk-very-secret" {
		t.Errorf("upstream Authorization %q", authz)
	}

	for _, sp := range []sdktrace.ReadOnlySpan{server, client} {
		a := attrsOf(sp)
		want := map[attribute.Key]any{
			"gen_ai.provider.name":           "fake",
			"gen_ai.operation.name":          "chat",
			"gen_ai.request.model":           "m",
			"gen_ai.request.max_tokens":      int64(50),
			"gen_ai.response.model":          "m-2024-01",
			"gen_ai.usage.input_tokens":      int64(11),
			"gen_ai.usage.output_tokens":     int64(2),
			"gen_ai.response.finish_reasons": []string{"stop"},
			"http.response.status_code":      int64(200),
			"sluice.provider":                "fake",
			"sluice.end_reason":              "complete",
		}
		for k, v := range want {
			got, ok := a[k]
			if !ok {
				t.Errorf("%s span: %s missing", sp.SpanKind(), k)
				continue
			}
			if !equalAttr(got, v) {
				t.Errorf("%s span: %s = %v, want %v", sp.SpanKind(), k, got.String(), v)
			}
		}
		if ttft, ok := a["sluice.ttft_seconds"]; !ok || ttft.AsFloat64() < gap.Seconds()*0.8 {
			t.Errorf("%s span: sluice.ttft_seconds = %v, want about %v", sp.SpanKind(), ttft.AsFloat64(), gap.Seconds())
		}
		// No key, prompt or completion anywhere.
		for k, v := range a {
			s := v.String()
			for _, secret := range []string{"sk-very-secret", "top secret", "hidden", "completion"} {
				if strings.Contains(s, secret) {
					t.Errorf("%s span: attribute %s carries %q", sp.SpanKind(), k, secret)
				}
			}
		}
		if sp.Status().Code == codes.Error {
			t.Errorf("%s span: status error %q", sp.SpanKind(), sp.Status().Description)
		}
	}
	sa := attrsOf(server)
	for _, k := range []attribute.Key{"sluice.queue_wait_seconds", "sluice.limit", "sluice.inflight"} {
		if _, ok := sa[k]; !ok {
			t.Errorf("server span: %s missing", k)
		}
	}
	if sa["sluice.limit"].AsInt64() != 4 || sa["sluice.inflight"].AsInt64() != 1 {
		t.Errorf("limit/in-flight at admission: %v/%v, want 4/1", sa["sluice.limit"].AsInt64(), sa["sluice.inflight"].AsInt64())
	}
	// The first-token event: on the server span, after ~one gap.
	var first *sdktrace.Event
	for _, ev := range server.Events() {
		if ev.Name == eventFirstToken {
			first = &ev
		}
	}
	if first == nil {
		t.Fatal("no first-token event on the server span")
	}
	// The first token comes one gap after the start; four more events
	// follow it, one gap apart.
	if d := first.Time.Sub(server.StartTime()); d < gap*8/10 || first.Time.After(server.EndTime().Add(-2*gap)) {
		t.Errorf("first token event %v after span start, %v before its end; want about %v after the start", d, server.EndTime().Sub(first.Time), gap)
	}
	// The spans end with the stream (5 events, one gap apart), not when the
	// handler returned (right after the headers).
	for _, sp := range []sdktrace.ReadOnlySpan{server, client} {
		if d := sp.EndTime().Sub(sp.StartTime()); d < 4*gap {
			t.Errorf("%s span lasted %v: it ended before the stream (>= %v)", sp.SpanKind(), d, 4*gap)
		}
		if sp.EndTime().Before(start) || sp.EndTime().After(streamEnd.Add(500*time.Millisecond)) {
			t.Errorf("%s span ended at %v, stream ended at %v", sp.SpanKind(), sp.EndTime(), streamEnd)
		}
	}
	if server.EndTime().Before(client.EndTime()) {
		t.Error("server span ended before its client span")
	}
}

func equalAttr(got attribute.Value, want any) bool {
	switch w := want.(type) {
	case string:
		return got.Type() == attribute.STRING && got.AsString() == w
	case int64:
		return got.Type() == attribute.INT64 && got.AsInt64() == w
	case []string:
		g := got.AsStringSlice()
		if len(g) != len(w) {
			return false
		}
		for i := range g {
			if g[i] != w[i] {
				return false
			}
		}
		return true
	}
	return false
}

// An upstream error and a rejection: spans carry the status and reason.
func TestTracingErrorsAndRejections(t *testing.T) {
	up := newGenAIUpstream(t, time.Millisecond)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	cfg := testConfig(up.addr, func(p *config.Provider) { p.Queue.MaxWaiting = 0 })
	s := startSluiceWith(t, cfg, Options{TracerProvider: tp})
	c := httpClient()

	// A 529 is retried once (retries.max_attempts 2): a server span and
	// a client span per attempt, the first marked as retried.
	resp := post(t, c, s.base+"/fake/v1/messages", map[string]string{"x-status": "529"})
	if readAll(t, resp); resp.StatusCode != 529 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	testutil.Eventually(t, "spans", 2*time.Second, func() bool { return len(exp.GetSpans()) == 3 })
	attempts := map[int64]string{}
	for _, sp := range exp.GetSpans().Snapshots() {
		a := attrsOf(sp)
		if a["http.response.status_code"].AsInt64() != 529 {
			t.Errorf("%s span status code %v", sp.SpanKind(), a["http.response.status_code"].String())
		}
		if sp.Status().Code != codes.Error || a["error.type"].AsString() == "" {
			t.Errorf("%s span: status %v, error.type %q", sp.SpanKind(), sp.Status(), a["error.type"].AsString())
		}
		if sp.SpanKind() == trace.SpanKindClient {
			attempts[a["sluice.attempt"].AsInt64()] = a["sluice.retry"].AsString()
			if a["sluice.upstream"].AsString() != "0" {
				t.Errorf("client span upstream %q, want 0", a["sluice.upstream"].AsString())
			}
		}
	}
	if len(attempts) != 2 || attempts[1] != "retried" || attempts[2] != "" {
		t.Errorf("client spans by attempt: %v, want 1: retried, 2: the last", attempts)
	}
	exp.Reset()

	// Ceiling 4, no queue: hold 4 permits with a limiter-level grab, then a
	// request is rejected at once.
	lim := s.srv.limiters.Limiter("fake")
	var held []func()
	for i := 0; i < 4; i++ {
		p := new(adaptive.Permit)
		if !lim.TryAcquire(time.Now(), adaptive.Flow{}, p) {
			t.Fatal("could not take a permit")
		}
		held = append(held, func() { p.Finish(time.Now(), adaptive.Outcome{}) })
	}
	resp = post(t, c, s.base+"/fake/v1/chat/completions", nil)
	readAll(t, resp)
	for _, r := range held {
		r()
	}
	if resp.StatusCode != 503 {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
	testutil.Eventually(t, "rejection span", 2*time.Second, func() bool { return len(exp.GetSpans()) == 1 })
	sp := exp.GetSpans().Snapshots()[0]
	a := attrsOf(sp)
	if sp.SpanKind() != trace.SpanKindServer || a["sluice.rejected"].AsString() != "queue_full" || a["http.response.status_code"].AsInt64() != 503 ||
		a["sluice.class"].AsString() != "standard" {
		t.Errorf("rejection span: kind %v, attrs %v", sp.SpanKind(), sp.Attributes())
	}
}

// Not sampled: no span is exported, and the upstream still gets a
// traceparent (unsampled) of the same trace. Tracing off: the client's
// headers pass through unchanged.
func TestTracingUnsampledAndOff(t *testing.T) {
	up := newGenAIUpstream(t, time.Millisecond)
	exp := tracetest.NewInMemoryExporter()
	never := sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(never))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	fast := NewTracerProvider(never, sdktrace.WithSyncer(exp))
	defer func() { _ = fast.Shutdown(context.Background()) }()
	for _, tc := range []struct {
		name string
		opts Options
	}{{"unsampled", Options{TracerProvider: tp}}, {"unsampled-fast", Options{TracerProvider: fast}}, {"off", Options{}}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startSluiceWith(t, testConfig(up.addr, nil), tc.opts)
			in := "00-" + clientTraceID + "-" + clientSpanID + "-00"
			readAll(t, post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{"traceparent": in, "tracestate": "k=v"}))
			tp0, ts0, _ := up.headers()
			switch tc.name {
			case "off":
				if tp0 != in || ts0 != "k=v" {
					t.Errorf("tracing off: upstream got %q %q, want the client's headers", tp0, ts0)
				}
			default:
				if !strings.HasPrefix(tp0, "00-"+clientTraceID+"-") || !strings.HasSuffix(tp0, "-00") || strings.Contains(tp0, clientSpanID) {
					t.Errorf("unsampled: upstream traceparent %q, want same trace, new span, unsampled", tp0)
				}
				if ts0 != "k=v" {
					t.Errorf("unsampled: tracestate %q", ts0)
				}
			}
			time.Sleep(20 * time.Millisecond)
			if n := len(exp.GetSpans()); n != 0 {
				t.Errorf("%d spans exported", n)
			}
		})
	}
}

// injectTraceContext writes what the OpenTelemetry propagator writes.
func TestInjectTraceContextMatchesPropagator(t *testing.T) {
	ts, _ := trace.ParseTraceState("a=1,b=2")
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled, trace.FlagsSampled | trace.FlagsRandom} {
		for _, state := range []trace.TraceState{{}, ts} {
			tid, _ := trace.TraceIDFromHex(clientTraceID)
			sid, _ := trace.SpanIDFromHex(clientSpanID)
			sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, TraceState: state})
			want := propagation.MapCarrier{}
			propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), want)
			var h fasthttp.RequestHeader
			h.Set("tracestate", "stale=1")
			injectTraceContext(&h, sc)
			if got := string(h.Peek("traceparent")); got != want["traceparent"] {
				t.Errorf("traceparent %q, want %q", got, want["traceparent"])
			}
			if got := string(h.Peek("tracestate")); got != want["tracestate"] {
				t.Errorf("tracestate %q, want %q", got, want["tracestate"])
			}
		}
	}
	var h fasthttp.RequestHeader
	if injectTraceContext(&h, trace.SpanContext{}); len(h.Peek("traceparent")) != 0 {
		t.Error("invalid span context injected")
	}
	if n := testing.AllocsPerRun(100, func() {
		tid, _ := trace.TraceIDFromHex(clientTraceID)
		sid, _ := trace.SpanIDFromHex(clientSpanID)
		injectTraceContext(&h, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	}); n != 0 {
		t.Errorf("injectTraceContext allocates %v times", n)
	}
}

func TestCaptureResponseModel(t *testing.T) {
	for in, want := range map[string]string{
		`data: {"id":"x","model":"gpt-4o-2024","choices":[]}`:                                             "gpt-4o-2024",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\" : \"claude-x\"}}": "claude-x",
		`{"model":123}`:    "",
		`{"model":"a\"b"}`: "",
		`{"nomodel":"x"}`:  "",
		`{"model":"` + strings.Repeat("x", 200) + `"}`: "",
	} {
		var st stream
		st.wantModel = true
		st.captureResponseModel([]byte(in))
		if st.respModel != want || st.wantModel {
			t.Errorf("%q: model %q, want %q", in, st.respModel, want)
		}
	}
}

func TestOperationAndProviderNames(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/chat/completions": "chat", "/v1/messages": "chat", "/v1/responses": "chat",
		"/v1/embeddings": "embeddings", "/v1/completions?x=1": "text_completion",
	} {
		if got := operationName([]byte(path)); got != want {
			t.Errorf("operationName(%s) = %s, want %s", path, got, want)
		}
	}
	for up, want := range map[string]string{
		"https://api.openai.com": "openai", "https://api.anthropic.com/": "anthropic",
		"https://x.openai.azure.com": "azure.ai.openai", "http://10.0.0.1:8000": "mine",
	} {
		p := &provider{name: "mine"}
		p.cfg.Upstream = up
		if got := genAIProviderName(p); got != want {
			t.Errorf("genAIProviderName(%s) = %s, want %s", up, got, want)
		}
	}
}

// With Sluice's TracerProvider, Sluice samples root requests at the
// configured ratio, the spans it samples carry the trace ID the decision was
// made on (the SDK agreed), a sampled client's trace is always followed, and
// the unsampled path allocates nothing.
func TestTracingFastSampling(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := NewTracerProvider(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.25)), sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	s := New(Options{TracerProvider: tp})
	if err := s.Apply(testConfig("http://127.0.0.1:1", nil)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	snap := s.snap.Load()
	p := snap.providers[0]
	rest := []byte("/v1/chat/completions")
	one := func(in *fasthttp.RequestHeader) (sent string, sampled bool) {
		st := getStream(s, p)
		st.telemetry = p.telemetry
		st.startServerSpan(in, rest)
		st.start = time.Now()
		st.traceUpstream()
		sent = string(st.req.Header.Peek("traceparent"))
		sampled = st.span != nil && st.span.IsRecording()
		st.finishTelemetry(st.start, outComplete)
		st.put()
		return sent, sampled
	}
	var in fasthttp.RequestHeader
	in.SetMethod("POST")
	const n = 2000
	sampled := 0
	for i := 0; i < n; i++ {
		// A sampled root propagates its context; an unsampled one, like
		// tracing off, propagates nothing.
		tp0, yes := one(&in)
		if yes != (tp0 != "") || (yes && (!strings.HasPrefix(tp0, "00-") || !strings.HasSuffix(tp0, "-01") || len(tp0) != 55)) {
			t.Fatalf("sampled %v but propagated %q", yes, tp0)
		}
		if yes {
			sampled++
		}
	}
	if sampled < n/4-100 || sampled > n/4+100 {
		t.Errorf("sampled %d of %d at ratio 0.25", sampled, n)
	}
	// Every sampled request exported its server span, in the trace the
	// upstream was told about.
	servers := 0
	for _, sp := range exp.GetSpans().Snapshots() {
		if sp.SpanKind() == trace.SpanKindServer {
			servers++
			if sp.Parent().IsValid() {
				t.Errorf("root request got parent %v", sp.Parent())
			}
		}
	}
	if servers != sampled {
		t.Errorf("%d server spans exported, %d sampled", servers, sampled)
	}
	// A sampled incoming trace is always followed; an unsampled one is
	// never sampled but still propagated (with Sluice's span ID).
	in.Set("traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-01")
	for i := 0; i < 20; i++ {
		if tp0, yes := one(&in); !yes || !strings.HasPrefix(tp0, "00-"+clientTraceID+"-") || !strings.HasSuffix(tp0, "-01") {
			t.Fatalf("sampled parent not followed: %q", tp0)
		}
	}
	in.Set("traceparent", "00-"+clientTraceID+"-"+clientSpanID+"-00")
	for i := 0; i < 20; i++ {
		tp0, yes := one(&in)
		if yes || !strings.HasPrefix(tp0, "00-"+clientTraceID+"-") || !strings.HasSuffix(tp0, "-00") || strings.Contains(tp0, clientSpanID) {
			t.Fatalf("unsampled parent: sampled %v, propagated %q", yes, tp0)
		}
	}
	if raceEnabled {
		return // allocation counts are not meaningful under -race
	}
	// No allocation for an unsampled root request.
	never := NewTracerProvider(sdktrace.ParentBased(sdktrace.NeverSample()))
	defer func() { _ = never.Shutdown(context.Background()) }()
	s2 := New(Options{TracerProvider: never})
	if err := s2.Apply(testConfig("http://127.0.0.1:1", nil)); err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	snap2 := s2.snap.Load()
	p2 := snap2.providers[0]
	var in2 fasthttp.RequestHeader
	in2.SetMethod("POST")
	st := getStream(s2, p2)
	allocs := testing.AllocsPerRun(200, func() {
		st.telemetry = p2.telemetry
		st.startServerSpan(&in2, rest)
		st.traceUpstream()
		st.finishTelemetry(time.Now(), outComplete)
		st.span, st.spanCtx = nil, trace.SpanContext{}
	})
	st.put()
	if allocs != 0 {
		t.Errorf("unsampled request: %v allocations for tracing", allocs)
	}
}
