package proxy

import (
	"bytes"
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
)

// Handler is the fasthttp request handler of the proxy listener: route,
// check the method and path, read the body within its limits, inspect,
// admit, forward, then relay the response. Every request ends in
// Server.end, whichever way it goes.
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	snap := s.snap.Load()
	now := s.now()
	path := requestPath(ctx)
	p, rest := snap.router.match(ctx.Host(), path)
	st := getStream(s, p)
	if p == nil {
		st.dialect = feedback.DialectForPath(path)
		st.errs = snap.noRoute
		s.end(ctx, st, now, outNoRoute, adaptive.Outcome{})
		return
	}
	st.dialect = p.dialectFor(rest)
	if o, ok := checkRequest(ctx, rest); !ok {
		s.reject(ctx, st, now, o)
		return
	}
	st.lims = snap.lims
	body, o, ok := s.readRequestBody(ctx, st)
	if !ok {
		s.reject(ctx, st, now, o)
		return
	}
	st.info = feedback.InspectRequest(body)
	s.observeStart(st, ctx, rest)
	if s.draining.Load() {
		s.end(ctx, st, now, outRejectedShutdown, adaptive.Outcome{})
		return
	}
	s.watch.add(st, ctx.Conn(), ctx.ConnID())
	if o, ok := s.admit(st, now); !ok {
		s.end(ctx, st, s.now(), o, adaptive.Outcome{})
		return
	}
	s.forward(ctx, st, rest, body)
}

// reject ends a routed request that is refused before admission (bad
// method or path, oversized or over-budget body): counted under o, no span.
func (s *Server) reject(ctx *fasthttp.RequestCtx, st *stream, now time.Time, o outcome) {
	st.tel = st.prov.tel
	s.end(ctx, st, now, o, adaptive.Outcome{})
}

// admit gets the request a permit: one CAS on the fast path, otherwise a
// bounded, cancellable wait in FIFO order. On failure it returns the
// outcome to end with.
func (s *Server) admit(st *stream, now time.Time) (outcome, bool) {
	p := st.prov
	if !p.limiter.TryAcquire(now, &st.permit) {
		cancel, alive := st.waitChan()
		if !alive {
			return outQueuedClientGone, false
		}
		err := p.limiter.Acquire(now, cancel, &st.permit)
		switch {
		case errors.Is(err, adaptive.ErrQueueFull):
			return outQueueFull, false
		case errors.Is(err, adaptive.ErrQueueTimeout):
			return outQueueTimeout, false
		case err != nil && st.cut.Load():
			return outRejectedShutdown, false
		case err != nil:
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
	if o, ok := s.lease(st, &now); !ok {
		return o, false
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
	if st.status == fasthttp.StatusOK && isEventStream(st.resp.Header.ContentType()) && !st.resp.SkipBody {
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
		s.log.Warn("upstream request failed", "provider", st.prov.name, "reason", o.String(), "error", safeError(err))
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
	st.body = st.responseBody()
	// Headers go out at once, before a first token that may take seconds;
	// when body bytes came with them, they go out together with those.
	ctx.Response.ImmediateHeaderFlush = !st.bodyReady()
	st.meter.Reset(st.dialect, st.start)
	st.metered, st.streamed = true, true
	// A client that stops reading is cut after server.write_timeout, and
	// never holds the permit past the stream's total budget.
	st.writeCap = st.totalDL.Add(time.Second)
	st.startWriting(ctx, st.srv.now())
	ctx.SetBodyStream(st, -1)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

func isEventStream(ct []byte) bool {
	return len(ct) >= len("text/event-stream") && bytes.EqualFold(ct[:len("text/event-stream")], []byte("text/event-stream"))
}
