package proxy

import (
	"context"
	"testing"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkSpanPath measures the span work of one request alone (server
// span, client span or injection, end), unsampled and sampled, against the
// same steps with tracing off (baseline: stream state, header copy),
// without the network.
//
//	go test -run NONE -bench SpanPath -benchmem ./proxy/
func BenchmarkSpanPath(b *testing.B) {
	for _, v := range []struct {
		name  string
		ratio float64
	}{{"baseline", -1}, {"unsampled", 0}, {"sampled", 1}} {
		b.Run(v.name, func(b *testing.B) {
			opts := Options{}
			if v.ratio >= 0 {
				tp := NewTracerProvider(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(v.ratio)),
					sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				opts.TracerProvider = tp
			}
			s := New(opts)
			if err := s.Apply(testConfig("http://127.0.0.1:1", nil)); err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			snap := s.snap.Load()
			p := snap.providers[0]
			// What a typical client sends.
			var in fasthttp.RequestHeader
			in.SetMethod("POST")
			in.SetHost("sluice.local")
			in.Set("Content-Type", "application/json")
			in.Set("Authorization", "Bearer x")
			in.Set("User-Agent", "OpenAI/Python 1.99.0")
			in.Set("Accept", "application/json")
			in.SetContentLength(120)
			rest := []byte("/v1/chat/completions")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				st := getStream(s, p)
				st.info.Model, st.info.Stream = "m", true
				st.telemetry = p.telemetry
				if st.telemetry != nil {
					st.startServerSpan(&in, rest)
				}
				st.start = s.now()
				st.observeAdmitted()
				in.CopyTo(&st.req.Header) // as buildUpstreamRequest does; also in the baseline
				st.traceUpstream()
				st.status = 200
				if st.telemetry != nil {
					st.finishTelemetry(st.start, outComplete)
				}
				st.put()
			}
		})
	}
}
