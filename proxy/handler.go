package proxy

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
)

// Handler is the fasthttp request handler of the proxy listener: route,
// inspect, admit, forward, then relay the response. Every request ends in
// Server.end, whichever way it goes.
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	snap := s.snap.Load()
	now := s.now()
	p, rest := snap.router.match(ctx.Host(), ctx.Path())
	st := getStream(s, p)
	if p == nil {
		st.dialect = feedback.DialectForPath(ctx.Path())
		st.errs = snap.noRoute
		s.end(ctx, st, now, outNoRoute, adaptive.Outcome{})
		return
	}
	st.dialect = p.dialectFor(rest)
	body := ctx.PostBody()
	st.info = feedback.InspectRequest(body)
	s.observeStart(st, ctx, rest)
	if s.draining.Load() {
		s.end(ctx, st, now, outRejectedShutdown, adaptive.Outcome{})
		return
	}
	s.watch.add(st, ctx.Conn())
	if o, ok := s.admit(st, &ctx.Request.Header, now); !ok {
		s.end(ctx, st, s.now(), o, adaptive.Outcome{})
		return
	}
	s.forward(ctx, st, rest, body)
}

// admit gets the request a permit for its flow (flow.go: tenant, class,
// cost, deadline, retry): lock-free on the fast path, otherwise a bounded,
// cancellable wait in the provider's fair, priority-ordered queue. On
// failure it returns the outcome to end with.
func (s *Server) admit(st *stream, h *fasthttp.RequestHeader, now time.Time) (outcome, bool) {
	p := st.prov
	st.flow = p.flows.flow(h, &st.info)
	if !p.limiter.TryAcquire(now, st.flow, &st.permit) {
		cancel, alive := st.waitChan()
		if !alive {
			return outQueuedClientGone, false
		}
		err := p.limiter.Acquire(now, st.flow, cancel, &st.permit)
		switch {
		case err == nil:
		case !errors.Is(err, adaptive.ErrCanceled):
			return refusedOutcome(err, st.permit.Refusal()), false
		case st.cut.Load():
			return outRejectedShutdown, false
		default:
			return outQueuedClientGone, false
		}
		now = s.now()
		// A reload may have happened while this request waited: send it
		// with the current settings of the same provider (same limiter), so
		// that, say, a raised ceiling also brings its larger upstream pool.
		if cur := s.snap.Load().byName[p.name]; cur != nil && cur != p && cur.limiter == p.limiter {
			st.prov, st.errs = cur, cur.errs
		}
	}
	if st.gone.Load() {
		// The client left while the permit was being granted.
		if st.cut.Load() {
			return outRejectedShutdown, false
		}
		return outQueuedClientGone, false
	}
	st.start = now
	st.observeAdmitted()
	st.totalDL = now.Add(st.prov.timeouts.Total)
	st.firstTokenDeadline = now.Add(st.prov.timeouts.FirstToken)
	if !st.info.Stream || st.firstTokenDeadline.After(st.totalDL) {
		// A provider sends a non-streaming answer's headers only when the
		// whole answer is ready: it has the total budget, not first_token.
		st.firstTokenDeadline = st.totalDL
	}
	return 0, true
}

// forward sends the admitted request upstream and relays the response: a
// 200 event stream in reader mode (the handler returns and fasthttp ends
// the request in CloseWithError), anything else read whole.
func (s *Server) forward(ctx *fasthttp.RequestCtx, st *stream, rest, body []byte) {
	s.buildUpstreamRequest(ctx, st, st.prov, rest, body)
	st.traceUpstream()
	if err := st.roundTrip(st.prov.client); err != nil {
		s.upstreamFailed(ctx, st, err)
		return
	}
	st.status = st.resp.StatusCode()
	if st.status == fasthttp.StatusOK && isEventStream(st.resp.Header.ContentType()) {
		s.startStream(ctx, st)
		return
	}
	s.relayBuffered(ctx, st)
}

// upstreamFailed ends a round trip that produced no response header:
// connect failure, timeout, reset, client gone, shutdown.
func (s *Server) upstreamFailed(ctx *fasthttp.RequestCtx, st *stream, err error) {
	now := s.now()
	switch {
	case st.cut.Load():
		s.end(ctx, st, now, outShutdown, adaptive.Outcome{})
	case st.gone.Load():
		s.end(ctx, st, now, outClientGone, adaptive.Outcome{})
	default:
		o, class := classifyDoErr(err)
		if o == outFirstTokenTimeout && !st.info.Stream {
			// The deadline that passed was the total one (see admit): a
			// long answer, not evidence of congestion.
			o, class = outUpstreamTimeout, feedback.ErrOther
		}
		s.log.Warn("upstream request failed", "provider", st.prov.name, "reason", o.String(), "error", err.Error())
		s.end(ctx, st, now, o, controllerOutcome(0, class, 0))
	}
}

// startStream hands the upstream SSE body to fasthttp in reader mode: the
// handler returns now, fasthttp writes each Read as one flushed chunk, and
// calls CloseWithError at the end, where the request ends.
func (s *Server) startStream(ctx *fasthttp.RequestCtx, st *stream) {
	copyResponseHeaders(&ctx.Response.Header, &st.resp.Header)
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.ImmediateHeaderFlush = true
	st.body = st.resp.BodyStream()
	if st.body == nil {
		st.body = eofReader{}
	}
	st.meter.Reset(st.dialect, st.start)
	st.metered, st.streamed = true, true
	// Bound the whole response write: a client that stops reading must not
	// hold a permit past the stream's total budget.
	_ = ctx.SetWriteDeadline(st.totalDL.Add(time.Second))
	ctx.SetBodyStream(st, -1)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// relayBuffered reads a non-streaming response (JSON answers, errors) whole,
// meters it, and sends it with the upstream's status and headers.
func (s *Server) relayBuffered(ctx *fasthttp.RequestCtx, st *stream) {
	// Non-stream bodies get the total deadline (headers had first_token).
	if st.up.conn != nil {
		_ = st.up.conn.SetReadDeadline(st.totalDL)
	}
	ctx.Response.Reset()
	if o, ok := s.readBody(ctx, st); !ok {
		ctx.Response.Reset()
		s.end(ctx, st, s.now(), o, adaptive.Outcome{})
		return
	}
	now := s.now()
	respBody := ctx.Response.Body()
	st.meter.Reset(st.dialect, st.start)
	st.metered = true
	if st.wantModel {
		st.captureResponseModel(respBody)
	}
	var class feedback.ErrorClass
	if st.status >= 200 && st.status < 300 {
		st.meter.MeterJSON(respBody, now)
		class = st.meter.Result().ErrorClass
	} else {
		class = feedback.ClassifyError(st.status, respBody)
	}
	ra := feedback.RetryAfter(st.resp.Header.Peek("Retry-After"), st.resp.Header.Peek("Retry-After-Ms"), now)
	copyResponseHeaders(&ctx.Response.Header, &st.resp.Header)
	ctx.Response.Header.Del("Content-Length") // set again from the body
	ctx.Response.Header.SetContentLength(len(respBody))
	s.end(ctx, st, now, outComplete, controllerOutcome(st.status, class, ra))
}

// readBody copies the upstream body into the client response, up to
// Options.MaxResponseBody. When it cannot, it reports the outcome to end
// with.
func (s *Server) readBody(ctx *fasthttp.RequestCtx, st *stream) (outcome, bool) {
	r := st.resp.BodyStream()
	if r == nil {
		return 0, true
	}
	bp := copyBufPool.Get().(*[]byte)
	defer copyBufPool.Put(bp)
	buf := *bp
	w := ctx.Response.BodyWriter()
	total := 0
	for {
		n, err := r.Read(buf)
		if n > 0 {
			total += n
			if total > s.opts.MaxResponseBody {
				return outBadUpstreamBody, false
			}
			_, _ = w.Write(buf[:n])
		}
		if err == nil {
			continue
		}
		switch {
		case errors.Is(err, io.EOF):
			return 0, true
		case st.cut.Load():
			return outShutdown, false
		case st.gone.Load():
			return outClientGone, false
		}
		o, _ := classifyDoErr(err)
		if o == outFirstTokenTimeout {
			o = outUpstreamTimeout
		}
		return o, false
	}
}

func isEventStream(ct []byte) bool {
	return len(ct) >= len("text/event-stream") && bytes.EqualFold(ct[:len("text/event-stream")], []byte("text/event-stream"))
}
