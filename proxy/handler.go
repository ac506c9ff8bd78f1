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

// Handler is the fasthttp request handler of the proxy listener.
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	snap := s.snap.Load()
	p, rest := snap.router.match(ctx.Host(), ctx.Path())
	if p == nil {
		if m := s.opts.Metrics; m != nil {
			m.unrouted.Inc()
		}
		writeError(ctx, snap.noRoute, feedback.DialectForPath(ctx.Path()) == feedback.Anthropic, errNoRoute, 0)
		return
	}
	dialect := p.dialectFor(rest)
	anthropic := dialect == feedback.Anthropic
	if s.draining.Load() {
		snap.observeRejectedEarly(p, rejectShutdown)
		ctx.SetConnectionClose()
		writeError(ctx, p.errs, anthropic, errShuttingDown, 1)
		return
	}

	now := s.now()
	st := getStream(s, p)
	st.dialect = dialect
	body := ctx.PostBody()
	st.info = feedback.InspectRequest(body)
	s.observeStart(snap, st, ctx, rest)
	s.watch.add(st, ctx.Conn())

	// Admission: one CAS on the fast path; otherwise a bounded, cancellable
	// wait in FIFO order.
	permit, ok := p.limiter.TryAcquire(now)
	if !ok {
		cancel, alive := st.waitChan()
		if !alive {
			s.abandon(ctx, st)
			return
		}
		var err error
		permit, err = p.limiter.Acquire(now, cancel)
		if err != nil {
			s.watch.remove(st)
			switch {
			case errors.Is(err, adaptive.ErrQueueFull):
				writeError(ctx, p.errs, anthropic, errQueueFull, retryAfterSeconds(p.limiter))
			case errors.Is(err, adaptive.ErrQueueTimeout):
				writeError(ctx, p.errs, anthropic, errQueueTimeout, retryAfterSeconds(p.limiter))
			case st.cut.Load():
				ctx.SetConnectionClose()
				writeError(ctx, p.errs, anthropic, errShuttingDown, 1)
			default: // client gone: nobody to answer
				ctx.SetConnectionClose()
			}
			s.rejected(st, err)
			st.put()
			return
		}
		now = s.now()
		// A reload may have happened while this request waited: send it
		// with the current settings of the same provider (same limiter), so
		// that, say, a raised ceiling also brings its larger upstream pool.
		if cur := s.snap.Load().byName[p.name]; cur != nil && cur != p && cur.limiter == p.limiter {
			p, st.prov = cur, cur
		}
	}
	if !st.hold(permit) {
		s.abandon(ctx, st)
		return
	}
	st.start = now
	st.observeAdmitted()
	st.totalDL = now.Add(p.timeouts.Total)
	st.firstTokenDeadline = now.Add(p.timeouts.FirstToken)
	if !st.info.Stream || st.firstTokenDeadline.After(st.totalDL) {
		// A provider sends a non-streaming answer's headers only when the
		// whole answer is ready: it has the total budget, not first_token.
		st.firstTokenDeadline = st.totalDL
	}

	s.buildUpstreamRequest(ctx, st, p, rest, body)
	st.traceUpstream()
	if err := p.client.Do(&st.req, &st.resp); err != nil {
		s.upstreamFailed(ctx, st, err, anthropic)
		return
	}
	st.status = st.resp.StatusCode()

	if st.resp.StatusCode() == fasthttp.StatusOK && isEventStream(st.resp.Header.ContentType()) {
		s.startStream(ctx, st)
		return
	}
	s.relayBuffered(ctx, st, anthropic)
}

// abandon ends a request whose client went away before it was sent upstream.
func (s *Server) abandon(ctx *fasthttp.RequestCtx, st *stream) {
	ctx.SetConnectionClose()
	s.watch.remove(st)
	st.release(s.now())
	s.finished(st, s.now(), endClientGone)
	st.put()
}

// upstreamFailed handles a round trip that produced no response header:
// connect failure, timeout, reset, client gone, shutdown.
func (s *Server) upstreamFailed(ctx *fasthttp.RequestCtx, st *stream, err error, anthropic bool) {
	now := s.now()
	var reason endReason
	switch {
	case st.cut.Load():
		ctx.SetConnectionClose()
		writeError(ctx, st.prov.errs, anthropic, errShuttingDown, 1)
		reason = endShutdown
	case st.gone.Load():
		ctx.SetConnectionClose()
		reason = endClientGone
	default:
		kind, class := classifyDoErr(err)
		if kind == errFirstToken && !st.info.Stream {
			// The deadline that passed was the total one (see Handler): a
			// long answer, not evidence of congestion.
			kind, class = errUpstreamTimeout, feedback.ErrOther
		}
		reason = endReasonOfKind(kind)
		if feedback.Judge(0, class) == feedback.Drop {
			st.reportDrop(0, class, 0, now)
		}
		s.log.Warn("upstream request failed", "provider", st.prov.name, "reason", errSpecs[kind].reason, "error", err.Error())
		writeError(ctx, st.prov.errs, anthropic, kind, 0)
	}
	s.watch.remove(st)
	st.release(now)
	s.finished(st, now, reason)
	st.put()
}

// startStream hands the upstream SSE body to fasthttp in reader mode: the
// handler returns now, fasthttp writes each Read as one flushed chunk, and
// calls CloseWithError at the end, where the permit is released.
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
func (s *Server) relayBuffered(ctx *fasthttp.RequestCtx, st *stream, anthropic bool) {
	status := st.resp.StatusCode()
	// Non-stream bodies get the total deadline (headers had first_token).
	if st.up.conn != nil {
		_ = st.up.conn.SetReadDeadline(st.totalDL)
	}
	complete := true
	var readErr error
	ctx.Response.Reset()
	if r := st.resp.BodyStream(); r != nil {
		bp := copyBufPool.Get().(*[]byte)
		buf := *bp
		w := ctx.Response.BodyWriter()
		total := 0
		for {
			n, err := r.Read(buf)
			if n > 0 {
				total += n
				if total > s.opts.MaxResponseBody {
					complete = false
					break
				}
				_, _ = w.Write(buf[:n])
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					complete, readErr = false, err
				}
				break
			}
		}
		copyBufPool.Put(bp)
	}
	now := s.now()
	if !complete {
		st.closeUpstream(false)
		ctx.Response.Reset()
		reason := endClientGone
		if st.cut.Load() {
			reason = endShutdown
		}
		if st.gone.Load() {
			ctx.SetConnectionClose()
		} else {
			kind := errBadUpstreamBody
			if readErr != nil {
				kind, _ = classifyDoErr(readErr)
				if kind == errFirstToken {
					kind = errUpstreamTimeout
				}
			}
			writeError(ctx, st.prov.errs, anthropic, kind, 0)
			reason = endReasonOfKind(kind)
		}
		s.watch.remove(st)
		st.release(now)
		s.finished(st, now, reason)
		st.put()
		return
	}
	respBody := ctx.Response.Body()
	st.meter.Reset(st.dialect, st.start)
	st.metered = true
	if st.wantModel {
		st.captureResponseModel(respBody)
	}
	var class feedback.ErrorClass
	if status >= 200 && status < 300 {
		st.meter.MeterJSON(respBody, now)
		class = st.meter.Result().ErrorClass
	} else {
		class = feedback.ClassifyError(status, respBody)
	}
	switch feedback.Judge(status, class) {
	case feedback.Success:
		st.prov.limiter.Observe(st.permit, adaptive.Sample{Kind: adaptive.Answered, Now: now})
	case feedback.Drop:
		ra := feedback.RetryAfter(st.resp.Header.Peek("Retry-After"), st.resp.Header.Peek("Retry-After-Ms"), now)
		st.reportDrop(status, class, ra, now)
	}
	copyResponseHeaders(&ctx.Response.Header, &st.resp.Header)
	ctx.Response.Header.Del("Content-Length") // set again from the body
	ctx.Response.Header.SetContentLength(len(respBody))
	st.closeUpstream(true)
	s.watch.remove(st)
	st.release(now)
	s.finished(st, now, endComplete)
	st.put()
}

func isEventStream(ct []byte) bool {
	return len(ct) >= len("text/event-stream") && bytes.EqualFold(ct[:len("text/event-stream")], []byte("text/event-stream"))
}

func retryAfterSeconds(l *adaptive.Limiter) int {
	return int(l.RetryAfter() / time.Second)
}
