package proxy

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracerProvider is an SDK tracer provider whose sampler Sluice can ask
// itself (the admin package builds it from the OTEL_* environment). Given
// one, Sluice takes the sampling decision of a request's server span itself,
// with the provider's own sampler, before asking the SDK for a span: an
// unsampled request then costs no SDK span, no context and no allocation
// (when it belongs to a client's trace, the unsampled continuation is
// still propagated upstream). A sampled one gets its span from the SDK with
// the trace ID the decision was made on, so the SDK's sampler,
// deterministic in the parent and trace ID, agrees.
//
// Any other trace.TracerProvider works too; the SDK then makes every
// decision, at the cost of a non-recording span per unsampled request.
type TracerProvider struct {
	*sdktrace.TracerProvider
	sampler sdktrace.Sampler
}

// NewTracerProvider builds a TracerProvider sampling with sampler, with the
// SDK options opts (exporter, resource, ...).
func NewTracerProvider(sampler sdktrace.Sampler, opts ...sdktrace.TracerProviderOption) *TracerProvider {
	opts = append(opts, sdktrace.WithSampler(sampler), sdktrace.WithIDGenerator(presetIDs{}))
	return &TracerProvider{TracerProvider: sdktrace.NewTracerProvider(opts...), sampler: sampler}
}

// presetIDs is the SDK ID generator of a TracerProvider: random IDs, except
// that a root span started with presetIDsKey in its context gets the IDs
// its sampling decision was made on.
type presetIDs struct{}

type presetIDsKey struct{}

type idPair struct {
	tid trace.TraceID
	sid trace.SpanID
}

func (presetIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if p, ok := ctx.Value(presetIDsKey{}).(*idPair); ok {
		return p.tid, p.sid
	}
	return randomTraceID(), randomSpanID()
}

func (presetIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

func randomTraceID() trace.TraceID {
	var t trace.TraceID
	for !t.IsValid() {
		binary.NativeEndian.PutUint64(t[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(t[8:], rand.Uint64())
	}
	return t
}

func randomSpanID() trace.SpanID {
	var s trace.SpanID
	for !s.IsValid() {
		binary.NativeEndian.PutUint64(s[:], rand.Uint64())
	}
	return s
}
