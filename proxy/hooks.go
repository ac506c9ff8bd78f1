package proxy

import (
	"errors"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
)

// Hooks observe the request path (metrics, tracing). They run on request
// goroutines and must be cheap and safe for concurrent use. Nil fields are
// skipped.
//
// Sluice's own metrics and traces do not go through Hooks: they are resolved
// per provider when a config is applied (see providerTel) so the request
// path never looks up a label value. Hooks remain for embedders that want a
// callback per request.
type Hooks struct {
	// Rejected runs when admission refused a request or the client left
	// while it waited.
	Rejected func(provider string, err error)
	// Finished runs once per admitted request, when it ends.
	Finished func(e RequestEnd)
}

// RequestEnd summarises one admitted request.
type RequestEnd struct {
	Provider string
	Status   int // upstream status; 0 when no response arrived
	Complete bool
	Reason   string // how it ended: an end-reason label (see docs/observability.md)
	Waited   time.Duration
	Duration time.Duration // permit held
	TTFT     time.Duration // 0 when no output token was seen
	Tokens   int
}

// SetHooks installs h for all following requests.
func (s *Server) SetHooks(h *Hooks) { s.hooks.Store(h) }

// endReason says how an admitted request ended. It is the
// sluice_requests_total "end" label and the sluice.end_reason span
// attribute; every value is resolved to a metric handle at Apply.
type endReason uint8

const (
	endComplete            endReason = iota // the whole response was relayed
	endClientGone                           // the client left (or stopped reading)
	endUpstreamUnreachable                  // connect failed or closed before answering (502)
	endFirstTokenTimeout                    // no headers or no first token within timeouts.first_token
	endUpstreamTimeout                      // a non-streaming body took longer than timeouts.total (504)
	endBadUpstreamBody                      // upstream body unreadable or too large (502)
	endIdleTimeout                          // a stream was silent longer than timeouts.idle
	endTotalTimeout                         // a stream ran past timeouts.total
	endUpstreamBroke                        // the upstream connection broke mid-stream
	endShutdown                             // cut by shutdown
	endAborted                              // the response ended for another reason before EOF
	numEndReasons
)

// endReasonSpec is the label of each reason and the status Sluice answers
// with when the response had not started (0: nothing is sent).
var endReasonSpec = [numEndReasons]struct {
	label  string
	status int
}{
	endComplete:            {"complete", 0},
	endClientGone:          {"client_gone", 0},
	endUpstreamUnreachable: {"upstream_unreachable", 502},
	endFirstTokenTimeout:   {"first_token_timeout", 504},
	endUpstreamTimeout:     {"upstream_timeout", 504},
	endBadUpstreamBody:     {"upstream_bad_response", 502},
	endIdleTimeout:         {"idle_timeout", 0},
	endTotalTimeout:        {"total_timeout", 0},
	endUpstreamBroke:       {"upstream_broke", 0},
	endShutdown:            {"shutdown", 503},
	endAborted:             {"aborted", 0},
}

func (r endReason) String() string { return endReasonSpec[r].label }

// endReasonOfKind maps an error Sluice answered after admission to the end
// reason.
func endReasonOfKind(k errKind) endReason {
	switch k {
	case errFirstToken:
		return endFirstTokenTimeout
	case errUpstreamTimeout:
		return endUpstreamTimeout
	case errBadUpstreamBody:
		return endBadUpstreamBody
	case errShuttingDown:
		return endShutdown
	}
	return endUpstreamUnreachable
}

// streamEndReason maps the error fasthttp passes to CloseWithError.
func (st *stream) streamEndReason(err error) endReason {
	switch {
	case err == nil && st.eof:
		return endComplete
	case st.cut.Load() || errors.Is(err, errShutdownCut):
		return endShutdown
	case errors.Is(err, errIdleTimeout):
		return endIdleTimeout
	case errors.Is(err, errTotalTimeout):
		return endTotalTimeout
	case errors.Is(err, errFirstTokenTimeout):
		return endFirstTokenTimeout
	case errors.Is(err, errUpstreamBroke):
		return endUpstreamBroke
	case st.gone.Load() || err != nil:
		return endClientGone
	}
	return endAborted
}

// rejectReason says why a request never got a permit: the
// sluice_rejected_requests_total "reason" label.
type rejectReason uint8

const (
	rejectQueueFull    rejectReason = iota // 429: the wait queue was full
	rejectQueueTimeout                     // 429: no permit within queue.max_wait
	rejectClientGone                       // the client left before it got a permit
	rejectShutdown                         // 503: the server is shutting down
	numRejectReasons
)

var rejectReasonLabel = [numRejectReasons]string{
	rejectQueueFull:    "queue_full",
	rejectQueueTimeout: "queue_timeout",
	rejectClientGone:   "client_gone",
	rejectShutdown:     "shutting_down",
}

var rejectReasonStatus = [numRejectReasons]int{429, 429, 0, 503}

func rejectReasonOf(st *stream, err error) rejectReason {
	switch {
	case errors.Is(err, adaptive.ErrQueueFull):
		return rejectQueueFull
	case errors.Is(err, adaptive.ErrQueueTimeout):
		return rejectQueueTimeout
	case st.cut.Load():
		return rejectShutdown
	}
	return rejectClientGone
}

// providerTel is what the request path reports to about one provider:
// metric handles with their label values resolved and tracing settings
// built when the config is applied. nil parts are off.
type providerTel struct {
	m  *providerMetrics
	tr *providerTracing
}

// buildTel resolves the telemetry of every provider of a snapshot being
// built (provider.tel stays nil when both metrics and tracing are off).
func (s *Server) buildTel(ps []*provider) {
	if s.opts.Metrics == nil && s.tracer == nil {
		return
	}
	for _, p := range ps {
		t := &providerTel{}
		if s.opts.Metrics != nil {
			t.m = s.opts.Metrics.forProvider(p.name)
		}
		if s.tracer != nil {
			t.tr = newProviderTracing(s.tracer, s.sampler, p)
		}
		p.tel = t
	}
}

// observeStart runs once a routed request has its stream state: it picks
// the provider's telemetry and opens the server span.
func (s *Server) observeStart(snap *snapshot, st *stream, ctx *fasthttp.RequestCtx, rest []byte) {
	st.tel = st.prov.tel
	if st.tel != nil && st.tel.tr != nil {
		st.startServerSpan(&ctx.Request.Header, rest)
	}
}

// observeAdmitted runs once the request holds its permit.
func (st *stream) observeAdmitted() {
	if st.tel == nil {
		return
	}
	if m := st.tel.m; m != nil {
		m.queueWait.Observe(st.permit.Waited.Seconds())
	}
	if st.span != nil && st.span.IsRecording() {
		st.spanAdmitted()
	}
}

// observeFirstToken runs at the first output token of a stream.
func (st *stream) observeFirstToken(ttft time.Duration) {
	if st.tel == nil {
		return
	}
	if m := st.tel.m; m != nil {
		m.ttft.Observe(ttft.Seconds())
	}
	if st.span != nil && st.span.IsRecording() {
		st.spanFirstToken(ttft)
	}
}

// observeDrop runs when a drop is reported for the request (once).
func (st *stream) observeDrop(k adaptive.DropKind) {
	if st.tel != nil && st.tel.m != nil && k != adaptive.DropNone && int(k) < len(st.tel.m.drops) {
		st.tel.m.drops[k].Inc()
	}
}

// observeRejectedEarly counts a request refused before it had stream state
// (draining).
func (snap *snapshot) observeRejectedEarly(p *provider, r rejectReason) {
	if t := p.tel; t != nil && t.m != nil {
		t.m.rejected[r].Inc()
	}
}

// finished ends an admitted request's telemetry. Exactly once per request
// that reached observeStart and was not rejected; a request that never got
// its permit (the client left first) counts as rejected.
func (s *Server) finished(st *stream, now time.Time, reason endReason) {
	if st.start.IsZero() {
		s.endRejected(st, rejectClientGone, nil)
		return
	}
	if st.tel != nil {
		st.finishTelemetry(now, reason)
	}
	h := s.hooks.Load()
	if h == nil || h.Finished == nil {
		return
	}
	e := RequestEnd{Provider: st.prov.name, Status: st.status, Complete: reason == endComplete, Reason: reason.String(), Waited: st.permit.Waited}
	e.Duration = now.Sub(st.start)
	if st.firstSeen {
		r := st.meter.Result()
		e.TTFT, e.Tokens = r.TTFT, r.OutputTokens
	}
	h.Finished(e)
}

// rejected ends the telemetry of a request admission refused.
func (s *Server) rejected(st *stream, err error) {
	s.endRejected(st, rejectReasonOf(st, err), err)
}

func (s *Server) endRejected(st *stream, r rejectReason, err error) {
	if st.tel != nil {
		if m := st.tel.m; m != nil {
			m.rejected[r].Inc()
		}
		if st.span != nil {
			st.endSpanRejected(r)
		}
	}
	if h := s.hooks.Load(); h != nil && h.Rejected != nil {
		if err == nil {
			err = adaptive.ErrCanceled
		}
		h.Rejected(st.prov.name, err)
	}
}

// finishTelemetry records the end of an admitted request: counters and
// histograms, then the spans.
func (st *stream) finishTelemetry(now time.Time, reason endReason) {
	if m := st.tel.m; m != nil {
		m.ends[reason].Inc()
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
				t := m.modelTokens(st.info.Model)
				t.in.Add(float64(in))
				t.out.Add(float64(r.OutputTokens))
			}
		}
	}
	if st.span != nil {
		st.endSpans(reason)
	}
}
