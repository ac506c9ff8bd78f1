package proxy

import (
	"time"

	"github.com/valyala/fasthttp"
)

// providerTelemetry is what the request path reports to about one provider:
// metric handles with their label values resolved and tracing settings
// built when the config is applied. nil parts are off.
type providerTelemetry struct {
	metrics *providerMetrics
	classes []classMetrics // by class index of flows; nil when metrics are off
	flows   *flowRules     // the provider's classes, for classes and span attributes
	tracing *providerTracing
}

// buildTelemetry resolves the telemetry of every provider of a snapshot being
// built (provider.telemetry stays nil when both metrics and tracing are off).
func (s *Server) buildTelemetry(ps []*provider) {
	if s.opts.Metrics == nil && s.tracer == nil {
		return
	}
	for _, p := range ps {
		t := &providerTelemetry{flows: p.flows}
		if s.opts.Metrics != nil {
			t.metrics = s.opts.Metrics.forProvider(p.name)
			t.classes = s.opts.Metrics.forClasses(p.name, p.flows.names)
		}
		if s.tracer != nil {
			t.tracing = newProviderTracing(s.tracer, s.sampler, p)
		}
		p.telemetry = t
	}
}

// observeStart runs once a routed request has its stream state: it picks
// the provider's telemetry and opens the server span.
func (s *Server) observeStart(st *stream, ctx *fasthttp.RequestCtx, rest []byte) {
	st.telemetry = st.prov.telemetry
	if st.telemetry != nil && st.telemetry.tracing != nil {
		st.startServerSpan(&ctx.Request.Header, rest)
	}
}

// observeAdmitted runs once the request holds its permit.
func (st *stream) observeAdmitted() {
	if st.telemetry == nil {
		return
	}
	if c := st.metricsOfClass(); c != nil {
		c.queueWait.Observe(st.permit.Waited().Seconds())
	}
	if st.span != nil && st.span.IsRecording() {
		st.spanAdmitted()
	}
}

// metricsOfClass returns the metric handles of the request's class, nil when
// metrics are off.
func (st *stream) metricsOfClass() *classMetrics {
	if i := st.telemetry.flows.index(st.flow.Class); i < len(st.telemetry.classes) {
		return &st.telemetry.classes[i]
	}
	return nil
}

// className is the name of the request's class.
func (st *stream) className() string {
	return st.telemetry.flows.names[st.telemetry.flows.index(st.flow.Class)]
}

// observeFirstToken runs at the first output token of a stream.
func (st *stream) observeFirstToken(ttft time.Duration) {
	if st.telemetry == nil {
		return
	}
	if m := st.telemetry.metrics; m != nil {
		m.ttft.Observe(ttft.Seconds())
	}
	if st.span != nil && st.span.IsRecording() {
		st.spanFirstToken(ttft)
	}
}

// finishTelemetry records the end of an admitted request: counters and
// histograms, then the spans.
func (st *stream) finishTelemetry(now time.Time, o outcome) {
	if m := st.telemetry.metrics; m != nil {
		m.outcomes[o].Inc()
		if c := st.status / 100; st.status > 0 {
			if c >= len(m.responses) {
				c = 0
			}
			m.responses[c].Inc()
		}
		m.duration.Observe(now.Sub(st.start).Seconds())
		if st.metered && st.status/100 == 2 {
			r := st.meter.Result()
			if r.Deltas >= 2 && r.DecodeTime > 0 {
				m.tpot.Observe(r.DecodeTime.Seconds() / float64(r.Deltas-1))
			}
			in := r.InputTokens
			if in == 0 {
				in = st.info.PromptTokens
			}
			if in > 0 || r.OutputTokens > 0 {
				t := m.modelTokens(st.info.Model, now)
				t.in.Add(float64(in))
				t.out.Add(float64(r.OutputTokens))
			}
		}
	}
	if st.span != nil {
		st.endSpans(o)
	}
}
