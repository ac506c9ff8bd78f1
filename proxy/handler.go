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
// reserve its rate, admit, forward (attempt after attempt), then relay the
// response. The cheapest refusals come first. Every request ends in
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
	snap.clients.identify(&ctx.Request.Header, &st.id)
	switch pp := &p.policies[st.id.pol.idx]; {
	case st.id.pol.refuse:
		s.reject(ctx, st, now, outUnknownClient)
		return
	case !pp.allowed:
		s.reject(ctx, st, now, outProviderNotAllowed)
		return
	}
	st.serverLimits = snap.serverLimits
	body, o, ok := s.readRequestBody(ctx, st)
	if !ok {
		s.reject(ctx, st, now, o)
		return
	}
	dropTrailers(&ctx.Request.Header)
	st.info = feedback.InspectRequest(body)
	s.observeStart(st, ctx, rest)
	if s.draining.Load() {
		s.end(ctx, st, now, outRejectedShutdown, adaptive.Outcome{})
		return
	}
	wait, spent, o, ok, watched := s.reserveRateFleet(ctx, st, now)
	if !ok {
		s.end(ctx, st, s.now(), o, adaptive.Outcome{})
		return
	}
	if !watched {
		s.watch.add(st, ctx.Conn(), ctx.ConnID())
	}
	budget := time.Duration(-1) // the request's own deadline
	if spent > 0 {
		now = s.now()
		budget = max(st.adm.deadline-spent, 0)
	}
	if wait > 0 {
		if o, ok := s.waitRate(st, wait); !ok {
			s.end(ctx, st, s.now(), o, adaptive.Outcome{})
			return
		}
		now = s.now()
		budget = max(st.adm.deadline-spent-wait, 0)
	}
	if o, ok := s.admit(st, &ctx.Request.Header, now, budget); !ok {
		s.end(ctx, st, s.now(), o, adaptive.Outcome{})
		return
	}
	s.forward(ctx, st, rest, body)
}

// reject ends a routed request that is refused before admission (bad
// method or path, oversized or over-budget body): counted under o, no span.
func (s *Server) reject(ctx *fasthttp.RequestCtx, st *stream, now time.Time, o outcome) {
	st.telemetry = st.prov.telemetry
	s.end(ctx, st, now, o, adaptive.Outcome{})
}

// currentAfterWait returns the snapshot in force for a request whose
// permit was granted after a wait. A reload raises the limits before it
// stores its snapshot, and the raise may be what granted the permit: while
// Apply runs, wait for it (it holds s.mu throughout), so the request is
// sent with the new settings, not the old snapshot's (with a ceiling
// raised from 1 to 10, the old pool of 5 connections held half the
// requests back until the first streams ended).
func (s *Server) currentAfterWait() *snapshot {
	if s.applying.Load() {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	return s.snap.Load()
}

// deadline is how long the request may wait in all, for its rate and
// then its permit: its client's own timeout, capped, else max_wait
// (adaptive.Limiter.MaxWaitFor).
func (s *Server) deadline(st *stream, h *fasthttp.RequestHeader) time.Duration {
	return st.prov.limiter.MaxWaitFor(adaptive.Flow{MaxWait: st.prov.flows.clientWait(h)}, -1)
}

// admit gets the request a permit for its flow (flow.go: tenant, class,
// cost, deadline, retry): lock-free on the fast path, otherwise a bounded,
// cancellable wait in the provider's fair, priority-ordered queue, within
// the request's deadline and what a rate wait left of it (budget;
// negative: no further bound). On failure it returns the outcome
// to end with.
func (s *Server) admit(st *stream, h *fasthttp.RequestHeader, now time.Time, budget time.Duration) (outcome, bool) {
	p := st.prov
	st.flow = p.flows.flow(h, &st.info, &st.id, &p.policies[st.id.pol.idx])
	st.waitDeadline = now.Add(p.limiter.MaxWaitFor(st.flow, budget)) // a paced dispatch waits within it too
	if !p.limiter.TryAcquire(now, st.flow, &st.permit) {
		cancel, alive := st.waitChan()
		if !alive {
			return outQueuedClientGone, false
		}
		err := p.limiter.AcquireWithin(now, st.flow, cancel, budget, &st.permit)
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
		if cur := s.currentAfterWait().byName[p.name]; cur != nil && cur != p && cur.limiter == p.limiter {
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
	st.totalDeadline = now.Add(st.prov.timeouts.Total)
	return 0, true
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
		o, failure, class := classifyDoErr(err, st.info.Stream)
		s.log.Warn("upstream request failed", "provider", st.prov.name, "reason", o.String(), "error", safeError(err))
		s.end(ctx, st, now, o, adaptive.MeaningOf(adaptive.AttemptResult{Failure: failure, Class: class}).Controller)
	}
}

// startStream hands the upstream SSE body to fasthttp in reader mode: the
// handler returns now, fasthttp writes each Read as one flushed chunk, and
// calls CloseWithError at the end, where the request ends.
func (s *Server) startStream(ctx *fasthttp.RequestCtx, st *stream) {
	copyResponseHeaders(&ctx.Response.Header, &st.resp.Header)
	st.nameUpstream(&ctx.Response.Header)
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	st.body = st.responseBody()
	// Headers go out at once, before a first token that may take seconds;
	// when body bytes came with them, they go out together with those.
	ctx.Response.ImmediateHeaderFlush = !st.bodyReady()
	st.meter.Reset(st.dialect, st.adm.start)
	st.metered, st.streamed = true, true
	// A client that stops reading is cut after server.write_timeout, and
	// never holds the permit past the stream's total budget.
	st.writeCap = st.totalDeadline.Add(time.Second)
	st.startWriting(ctx, st.srv.now())
	ctx.SetBodyStream(st, -1)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

func isEventStream(ct []byte) bool {
	return len(ct) >= len("text/event-stream") && bytes.EqualFold(ct[:len("text/event-stream")], []byte("text/event-stream"))
}
