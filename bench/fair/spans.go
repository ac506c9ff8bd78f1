package fair

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// spanLog keeps what bench needs of Sluice's server spans: one record per
// request, as each ends. It is an OpenTelemetry span processor.
type spanLog struct {
	mu   sync.Mutex
	recs []spanRec
}

// spanRec is one request as Sluice saw it.
type spanRec struct {
	Start, End time.Time
	Class      string        // sluice.class
	Rejected   string        // sluice.rejected; "" when admitted
	Wait       time.Duration // sluice.queue_wait_seconds (admitted)
}

func (l *spanLog) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (l *spanLog) Shutdown(context.Context) error                  { return nil }
func (l *spanLog) ForceFlush(context.Context) error                { return nil }

func (l *spanLog) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanKind() != trace.SpanKindServer {
		return
	}
	r := spanRec{Start: s.StartTime(), End: s.EndTime()}
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case "sluice.class":
			r.Class = kv.Value.AsString()
		case "sluice.rejected":
			r.Rejected = kv.Value.AsString()
		case "sluice.queue_wait_seconds":
			if kv.Value.Type() == attribute.FLOAT64 {
				r.Wait = time.Duration(kv.Value.AsFloat64() * float64(time.Second))
			}
		}
	}
	l.mu.Lock()
	l.recs = append(l.recs, r)
	l.mu.Unlock()
}

// since returns the records of requests that started at or after t.
func (l *spanLog) since(t time.Time) []spanRec {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []spanRec
	for _, r := range l.recs {
		if !r.Start.Before(t) {
			out = append(out, r)
		}
	}
	return out
}
