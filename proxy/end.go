package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
)

// end is the one exit of every request, whatever happened to it. In this
// order it:
//
//  1. gives the upstream connection back (to the pool only after a
//     complete response, closed otherwise);
//  2. settles the request in its admission stack (stream.settle): ends
//     its current upstream attempt, settles its rate reservation with what
//     it used, and ends the permit with the controller's outcome ctl:
//     released exactly once, and a no-op when the request never got one
//     or the disconnect watcher or shutdown ended it already;
//  3. leaves the disconnect watcher;
//  4. answers the client with outcome o's row of the outcome table when
//     the response has not started (ctx is nil once fasthttp streams the
//     body, and nothing is sent to a client that left), closing the
//     connection gracefully when the request body was left unread;
//  5. records o in metrics and spans;
//  6. gives the bodies' budget back and returns the request state to the
//     pool (without buffers too large for it).
//
// Owner only, once per request.
func (s *Server) end(ctx *fasthttp.RequestCtx, st *stream, now time.Time, o outcome, ctl adaptive.Outcome) {
	st.closeUpstream(o == outComplete)
	st.settle(now, o, ctl)
	s.watch.remove(st)
	if ctx != nil {
		sp := &outcomes[o]
		if o == outShutdown || o == outRejectedShutdown || (sp.status == 0 && o != outComplete) {
			// Shutting down, or nobody left to answer.
			ctx.SetConnectionClose()
		}
		var ra time.Duration
		switch sp.ra {
		case raEstimate:
			// 0: no permit has ended yet, so there is no estimate; the
			// answer then has no Retry-After and clients back off on
			// their own.
			ra = st.permit.Refusal().RetryAfter
		case raOne:
			ra = time.Second
		case raComputed:
			// From the rate buckets: when the request would fit.
			if ra = st.adm.retryAfter; ra <= 0 {
				ra = time.Second
			}
		}
		answer(ctx, st.errs, st.dialect, o, ra)
		if !st.bodyRead && sp.status != 0 {
			// Refused before its body was read: answered so that a
			// client still sending it gets the answer, not a reset.
			s.closeAfterUnreadBody(ctx, o)
		}
	}
	s.record(st, now, o)
	st.adm.keepBody = false
	st.releaseRequestBody()
	st.releaseResponseBody()
	st.put()
}

// record counts o in the request metrics and ends the request's spans.
func (s *Server) record(st *stream, now time.Time, o outcome) {
	if st.prov == nil {
		if m := s.opts.Metrics; m != nil {
			m.unrouted.Inc()
		}
		return
	}
	if st.telemetry == nil {
		return
	}
	if !outcomes[o].admitted {
		if c := st.metricsOfClass(); c != nil {
			c.rejected[o].Inc()
		}
		if st.span != nil {
			st.endSpanRejected(o)
		}
		return
	}
	st.finishTelemetry(now, o)
}
