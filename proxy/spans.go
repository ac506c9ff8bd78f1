package proxy

// The spans of one request: the server span from routing to the end of the
// response, and the client span of the upstream attempt.

import (
	"bytes"
	"context"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
)

// startServerSpan opens the span of one proxied request, child of the
// client's trace context when it sent one. Attributes are built only when
// the span records.
func (st *stream) startServerSpan(h *fasthttp.RequestHeader, rest []byte) {
	tr := st.telemetry.tracing
	parent := context.Background()
	if len(h.PeekBytes(hdrTraceparent)) > 0 {
		parent = traceContext.Extract(parent, headerCarrier{h})
	}
	if tr.sampler != nil {
		// Decide here, as the SDK would, so that an unsampled request
		// costs no span (see TracerProvider).
		psc := trace.SpanContextFromContext(parent)
		ids := idPair{tid: psc.TraceID()}
		if !ids.tid.IsValid() {
			ids.tid = randomTraceID()
		}
		res := tr.sampler.ShouldSample(sdktrace.SamplingParameters{
			ParentContext: parent, TraceID: ids.tid, Name: tr.serverName, Kind: trace.SpanKindServer,
		})
		ids.sid = randomSpanID()
		if res.Decision == sdktrace.Drop {
			if psc.IsValid() {
				// Part of the client's trace: the upstream gets its
				// (unsampled) context with Sluice's span ID. A request
				// that starts a trace Sluice does not sample propagates
				// nothing, as with tracing off.
				st.spanCtx = trace.NewSpanContext(trace.SpanContextConfig{
					TraceID: ids.tid, SpanID: ids.sid, TraceState: res.Tracestate,
					TraceFlags: psc.TraceFlags() &^ trace.FlagsSampled,
				})
			}
			return
		}
		if !psc.TraceID().IsValid() {
			preset := ids // only sampled requests pay for this copy
			parent = context.WithValue(parent, presetIDsKey{}, &preset)
		}
	}
	_, span := tr.tracer.Start(parent, tr.serverName, serverSpanOpts...)
	st.span = span
	if !span.IsRecording() {
		return
	}
	st.operation = operationName(rest)
	// Attributes are collected in the pooled stream and set once when the
	// span ends: each SetAttributes call grows the span's slice.
	attrs := append(st.attrs[:0], tr.common...)
	attrs = append(attrs,
		attrGenAIOperation.String(st.operation),
		attrHTTPMethod.String(methodString(h.Method())),
		attrStream.Bool(st.info.Stream),
		attrPromptEstimate.Int(st.info.PromptTokens),
	)
	if st.info.Model != "" {
		attrs = append(attrs, attrGenAIRequestModel.String(st.info.Model))
	}
	if st.info.MaxTokens > 0 {
		attrs = append(attrs, attrGenAIMaxTokens.Int(st.info.MaxTokens))
	}
	st.attrs = attrs
}

func methodString(m []byte) string {
	switch string(m) {
	case fasthttp.MethodPost:
		return fasthttp.MethodPost
	case fasthttp.MethodGet:
		return fasthttp.MethodGet
	}
	return string(m)
}

// spanAdmitted records admission on a recording server span.
func (st *stream) spanAdmitted() {
	st.attrs = append(st.attrs,
		attrQueueWait.Float64(st.permit.Waited().Seconds()),
		attrClass.String(st.className()),
		attrLimit.Int(st.prov.limiter.Limit()),
		attrInflight.Int(st.permit.Inflight()),
	)
}

// traceUpstream opens the client span of the upstream attempt (when the
// server span records), one per attempt, and injects the trace context
// into the upstream request. An unsampled request that belongs to a client's trace still
// propagates its (unsampled) context, so the provider's own tracing sees one
// trace.
func (st *stream) traceUpstream() {
	if st.span == nil {
		// Tracing off, or decided unsampled without an SDK span.
		injectTraceContext(&st.req.Header, st.spanCtx)
		return
	}
	sc := st.span.SpanContext()
	if st.span.IsRecording() {
		tr := st.telemetry.tracing
		name := st.operation
		if st.info.Model != "" {
			name += " " + st.info.Model
		}
		ctx := trace.ContextWithSpan(context.Background(), st.span)
		_, st.upstreamSpan = tr.tracer.Start(ctx, name, clientSpanOpts...)
		attrs := append(st.upstreamAttrs[:0], tr.common...)
		if up := st.adm.target; up != nil {
			attrs = append(attrs, up.spanAttrs...)
			attrs = append(attrs, attrAttempt.Int(st.adm.attempts))
		}
		attrs = append(attrs, attrGenAIOperation.String(st.operation), attrHTTPMethod.String(methodString(st.req.Header.Method())))
		if st.info.Model != "" {
			attrs = append(attrs, attrGenAIRequestModel.String(st.info.Model))
		}
		if st.info.MaxTokens > 0 {
			attrs = append(attrs, attrGenAIMaxTokens.Int(st.info.MaxTokens))
		}
		st.upstreamAttrs = attrs
		sc = st.upstreamSpan.SpanContext()
		st.wantModel = true
	}
	injectTraceContext(&st.req.Header, sc)
}

// endAttemptSpan ends the client span of an attempt that failed and is
// retried: o is the outcome the failure would have ended the request with
// (outComplete for an answer read whole, whose status says the rest), and
// reason the retry decision.
func (st *stream) endAttemptSpan(o outcome, reason adaptive.RetryReason) {
	up := st.upstreamSpan
	if up == nil {
		return
	}
	st.upstreamSpan = nil
	ua := st.upstreamAttrs
	if st.status > 0 {
		ua = append(ua, attrHTTPStatus.Int(st.status))
	}
	et := o.String()
	if st.status >= 400 {
		et = strconv.Itoa(st.status)
	}
	ua = append(ua, attrErrorType.String(et), attrRetry.String(reason.String()))
	up.SetStatus(codes.Error, et)
	up.SetAttributes(ua...)
	st.upstreamAttrs = ua
	up.End()
}

// spanFirstToken adds the first-token event to the recording spans.
func (st *stream) spanFirstToken(ttft time.Duration) {
	ev := trace.WithAttributes(attrTTFT.Float64(ttft.Seconds()))
	st.span.AddEvent(eventFirstToken, ev)
	if st.upstreamSpan != nil {
		st.upstreamSpan.AddEvent(eventFirstToken, ev)
	}
}

// captureResponseModel reads the top-level "model" of the first response
// bytes (an OpenAI chunk or body, Anthropic's message_start, a Responses
// response.created event), for gen_ai.response.model. Only for recording
// spans, and only on the first read.
func (st *stream) captureResponseModel(p []byte) {
	st.wantModel = false
	if len(p) > 4096 {
		p = p[:4096]
	}
	i := bytes.Index(p, []byte(`"model"`))
	if i < 0 {
		return
	}
	p = p[i+len(`"model"`):]
	p = bytes.TrimLeft(p, " \t\r\n")
	if len(p) == 0 || p[0] != ':' {
		return
	}
	p = bytes.TrimLeft(p[1:], " \t\r\n")
	if len(p) == 0 || p[0] != '"' {
		return
	}
	p = p[1:]
	end := bytes.IndexByte(p, '"')
	if end <= 0 || end > 128 || bytes.IndexByte(p[:end], '\\') >= 0 {
		return
	}
	st.respModel = string(p[:end])
}

// endSpans ends the client span, then the server span, at the end of the
// response: the end of the stream for streams. Each span gets its
// attributes in one SetAttributes call.
func (st *stream) endSpans(reason outcome) {
	if st.span.IsRecording() {
		var r feedback.Result
		if st.metered {
			r = st.meter.Result()
		}
		// Response attributes, common to both spans.
		mark := len(st.attrs)
		attrs := append(st.attrs, attrEndReason.String(reason.String()))
		if st.respModel != "" {
			attrs = append(attrs, attrGenAIResponseModel.String(st.respModel))
		}
		if r.InputTokens > 0 {
			attrs = append(attrs, attrGenAIInputTokens.Int(r.InputTokens))
		}
		if r.TokensFromUsage {
			attrs = append(attrs, attrGenAIOutputTokens.Int(r.OutputTokens))
		}
		if st.metered {
			attrs = append(attrs, attrOutputDeltas.Int(r.Deltas))
		}
		if r.FinishReason != "" {
			attrs = append(attrs, attrGenAIFinishReasons.StringSlice([]string{r.FinishReason}))
		}
		if r.FirstToken {
			attrs = append(attrs, attrTTFT.Float64(r.TTFT.Seconds()))
		}
		if up := st.upstreamSpan; up != nil {
			ua := append(st.upstreamAttrs, attrs[mark:]...)
			if st.status > 0 {
				ua = append(ua, attrHTTPStatus.Int(st.status))
			}
			switch {
			case st.status >= 400:
				et := strconv.Itoa(st.status)
				ua = append(ua, attrErrorType.String(et))
				up.SetStatus(codes.Error, et)
			case reason != outComplete && reason != outClientGone:
				ua = append(ua, attrErrorType.String(reason.String()))
				up.SetStatus(codes.Error, reason.String())
			}
			up.SetAttributes(ua...)
			st.upstreamAttrs = ua
		}
		// What the client got: the upstream status once the response
		// started, else Sluice's own error (none when the client left).
		status := outcomes[reason].status
		if st.streamed || reason == outComplete {
			status = st.status
		}
		if status > 0 {
			attrs = append(attrs, attrHTTPStatus.Int(status))
		}
		switch {
		case status >= 500:
			attrs = append(attrs, attrErrorType.String(reason.String()))
			st.span.SetStatus(codes.Error, reason.String())
		case st.streamed && reason != outComplete && reason != outClientGone:
			// A truncated stream: the client saw 200 and then a broken body.
			attrs = append(attrs, attrErrorType.String(reason.String()))
			st.span.SetStatus(codes.Error, reason.String())
		}
		st.span.SetAttributes(attrs...)
		st.attrs = attrs
	}
	if st.upstreamSpan != nil {
		st.upstreamSpan.End()
	}
	st.span.End()
}

// endSpanRejected ends the server span of a request that never got a
// permit.
func (st *stream) endSpanRejected(o outcome) {
	if st.span.IsRecording() {
		label := o.String()
		attrs := append(st.attrs, attrRejected.String(label), attrErrorType.String(label), attrClass.String(st.className()))
		if s := outcomes[o].status; s > 0 {
			attrs = append(attrs, attrHTTPStatus.Int(s))
		}
		if o == outRejectedShutdown {
			st.span.SetStatus(codes.Error, label)
		}
		st.span.SetAttributes(attrs...)
		st.attrs = attrs
	}
	st.span.End()
}
