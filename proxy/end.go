package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
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
//     body, and nothing is sent to a client that left);
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
		ra := 0
		switch sp.ra {
		case raLimiter:
			ra = int(st.prov.limiter.RetryAfter() / time.Second)
		case raOne:
			ra = 1
		case raComputed:
			ra = int(max((st.adm.retryAfter+time.Second-1)/time.Second, 1)) // rounded up: a client that waits this long fits
		}
		answer(ctx, st.errs, st.dialect == feedback.Anthropic, o, ra)
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
	if st.tel == nil {
		return
	}
	if !outcomes[o].admitted {
		if m := st.tel.m; m != nil {
			m.outcomes[o].Inc()
		}
		if st.span != nil {
			st.endSpanRejected(o)
		}
		return
	}
	st.finishTelemetry(now, o)
}
