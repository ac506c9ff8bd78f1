package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
)

// forward sends the admitted request upstream and relays the response,
// attempt after attempt: a 200 event stream in reader mode (the handler
// returns and fasthttp ends the request in CloseWithError), anything else
// read whole.
//
// An attempt that fails before anything reached the client (a connect
// error, a reset or timeout before the response headers, or an answer
// such as 429, 503, 529 or 5xx that has been read whole but not relayed)
// may be tried again, on the same upstream or another, as the provider's
// retry policy decides (adaptive.RetryPolicy.Decide). The client's
// response is only ever written from the last attempt, so a client never
// receives bytes from two attempts. The request keeps its permit across
// its attempts (docs/architecture.md says why).
func (s *Server) forward(ctx *fasthttp.RequestCtx, st *stream, rest, body []byte) {
	p := st.prov
	maxAttempts := p.adm.Retry.MaxAttempts()
	if maxAttempts > 1 {
		p.adm.Retry.Request(st.start)
	}
	var avoid *adaptive.Upstream
	var strict bool
	var last outcome // how the previous attempt failed, when it had no answer
	var lastCtl adaptive.Outcome
	now := st.start // admission just read the clock
	for ; ; now = s.now() {
		up, ok := s.pick(st, now, avoid, strict)
		switch {
		case !ok && st.status != 0:
			s.relayBuffered(ctx, st, true, nil) // nowhere to retry: the kept answer stands
			return
		case !ok && last != 0:
			s.end(ctx, st, now, last, lastCtl) // nowhere to retry: the failure stands
			return
		case !ok:
			s.end(ctx, st, now, outNoUpstream, adaptive.Outcome{})
			return
		}
		if w, ok := st.adm.attempt.Pace(now, st.paceWithin(now)); !ok || w > 0 {
			// The provider refused for a request rate: the attempt waits
			// for its dispatch slot, holding its permit, unless the slot
			// comes after the request may wait.
			if !ok {
				st.adm.retryAfter = w
				s.end(ctx, st, now, outRateLimitedUpstream, adaptive.Outcome{})
				return
			}
			slept := st.sleep(w)
			now = s.now()
			st.adm.attempt.Paced(now)
			if !slept {
				s.end(ctx, st, now, st.goneOutcome(), adaptive.Outcome{})
				return
			}
			st.armAttempt(now)
		}
		st.dropAnswer()
		st.adm.keepBody = st.adm.attempts < maxAttempts
		s.buildUpstreamRequest(ctx, st, up, rest, body)
		st.traceUpstream()
		var d adaptive.RetryDecision
		if err := st.roundTrip(up.client); err != nil {
			if last, lastCtl, d = s.attemptFailed(st, err); !d.Retry {
				st.releaseBody()
				s.upstreamFailed(ctx, st, err)
				return
			}
		} else if d, ok = s.answer(ctx, st); !ok {
			return // relayed, streaming, or ended
		}
		avoid, strict = st.adm.attempt.Upstream(), d.Elsewhere
		if !st.sleep(d.Wait) {
			s.end(ctx, st, s.now(), st.goneOutcome(), adaptive.Outcome{})
			return
		}
		if room, alive := st.waitForRoom(s.now()); !room {
			switch now = s.now(); {
			case !alive:
				s.end(ctx, st, now, st.goneOutcome(), adaptive.Outcome{})
			case st.status != 0:
				s.relayBuffered(ctx, st, true, nil) // no room in time: the kept answer stands
			default:
				s.end(ctx, st, now, last, lastCtl)
			}
			return
		}
	}
}

// roomPoll is how often a retry that waits for room under its provider's
// limit looks again.
const roomPoll = 10 * time.Millisecond

// waitForRoom holds a retry, from now, until its provider's permits in use
// are within the limit (adaptive.Permit.Room), for what is left of the
// request's wait budget (its client's deadline, or queue.max_wait). A
// request keeps its permit across its attempts, so a retry is not queued
// again; but a refusal cuts the limit below the requests already in
// flight, the refused ones included, and their retries, sent when their
// Retry-After and backoff end, reached a provider that was as full as
// when it refused them: on a cold start's overshoot, every one was
// refused again, half of the provider's refusals, and the clients got
// them. Once enough streams have ended, the retry goes with the others
// in flight within the limit. It reports whether there is room, and
// whether the client is still there.
func (st *stream) waitForRoom(now time.Time) (room, alive bool) {
	for !st.permit.Room() {
		left := st.waitDeadline.Sub(now)
		if left <= 0 {
			return false, !st.gone.Load()
		}
		if !st.sleep(min(left, roomPoll)) {
			return false, false
		}
		now = st.srv.now()
	}
	return true, true
}

// answer handles the current attempt's answer: a 200 event stream starts
// streaming; anything else is read whole (as much as fits) and relayed,
// unless it is a failure the retry policy retries (ok true, with its
// decision: the answer is kept until the next attempt is under way, and
// relayed if none can be).
func (s *Server) answer(ctx *fasthttp.RequestCtx, st *stream) (adaptive.RetryDecision, bool) {
	st.adm.sent = true
	st.status = st.resp.StatusCode()
	if st.status == fasthttp.StatusOK && isEventStream(st.resp.Header.ContentType()) && !st.resp.SkipBody {
		st.learnHeaders(feedback.ErrNone)
		st.releaseBody()
		s.startStream(ctx, st)
		return adaptive.RetryDecision{}, false
	}
	complete, src, o, ok := st.bufferAnswer()
	if !ok {
		st.releaseBody()
		s.end(ctx, st, s.now(), o, adaptive.Outcome{})
		return adaptive.RetryDecision{}, false
	}
	if d := s.answerFailed(st, complete); d.Retry {
		return d, true
	}
	st.releaseBody()
	s.relayBuffered(ctx, st, complete, src)
	return adaptive.RetryDecision{}, false
}

// dropAnswer drops an answer kept from a failed attempt: a new attempt is
// under way.
func (st *stream) dropAnswer() {
	if st.status == 0 {
		return
	}
	st.releaseResponseBody()
	st.respBuf = st.respBuf[:0]
	st.status = 0
}

// pick chooses the upstream of the request's next attempt and arms its
// deadlines. It fails when no upstream can take it (every breaker open,
// or an upstream a reload added after the request's snapshot was built).
func (s *Server) pick(st *stream, now time.Time, avoid *adaptive.Upstream, strict bool) (*upstream, bool) {
	p := st.prov
	a := &st.adm
	var res *adaptive.Reservation
	if a.reserved {
		res = &a.reservation
	}
	a.attempt.SetQuotaKey(a.quotaKey)
	pr := p.adm.Upstreams.Pick(now, res, &st.permit, avoid, strict, &a.attempt)
	if !pr.OK {
		a.retryAfter = pr.RetryAfter
		return nil, false
	}
	up := p.upstreamOf(a.attempt.Upstream())
	if up == nil {
		// Added by a reload since the request's snapshot: send it with
		// the provider's current settings (same admission stack).
		if cur := s.snap.Load().byName[p.name]; cur != nil && cur.adm == p.adm {
			st.prov, st.errs = cur, cur.errs
			up = cur.upstreamOf(a.attempt.Upstream())
		}
		if up == nil {
			a.attempt.Finish(now, adaptive.AttemptResult{Failure: adaptive.AttemptCanceled})
			a.retryAfter = time.Second
			return nil, false
		}
	}
	a.target = up
	a.attempts++
	a.failure, a.class = adaptive.AttemptOK, feedback.ErrNone
	st.armAttempt(now)
	return up, true
}

// paceWithin is how long the request's next attempt may wait for a
// dispatch slot at now: a first attempt, what is left of its wait budget
// (its client's deadline, or queue.max_wait, from when it began to
// wait for a permit), so that pacing never makes a client wait longer
// than the queue would; a retry, what is left of its total budget.
func (st *stream) paceWithin(now time.Time) time.Duration {
	dl := st.totalDeadline
	if st.adm.attempts <= 1 && st.waitDeadline.Before(dl) {
		dl = st.waitDeadline
	}
	return max(dl.Sub(now), 0)
}

// armAttempt starts the current attempt's clock at now, when it is sent:
// TTFT and the first-token deadline count from here.
func (st *stream) armAttempt(now time.Time) {
	st.adm.start = now
	st.firstTokenDeadline, st.readDeadlineNext = now.Add(st.prov.timeouts.FirstToken), time.Time{}
	if !st.info.Stream || st.firstTokenDeadline.After(st.totalDeadline) {
		// A provider sends a non-streaming answer's headers only when the
		// whole answer is ready: it has the total budget, not first_token.
		st.firstTokenDeadline = st.totalDeadline
	}
}

// attemptFailed decides about an attempt whose round trip produced no
// response header: the outcome it would end the request with, what the
// controller hears, and whether to retry (then the attempt is finished
// and its span ended).
func (s *Server) attemptFailed(st *stream, err error) (outcome, adaptive.Outcome, adaptive.RetryDecision) {
	now := s.now()
	a := &st.adm
	o, failure, class := classifyDoErr(err, st.info.Stream)
	a.failure = failure
	if st.gone.Load() {
		a.failure = adaptive.AttemptCanceled
	}
	if a.failure != adaptive.AttemptConnect {
		a.sent = true
	}
	// The controller hears how the upstream failed, even when the client
	// left meanwhile (then no retry follows, and the request ends as
	// client_gone).
	ctl := adaptive.MeaningOf(adaptive.AttemptResult{Failure: failure, Class: class}).Controller
	r := adaptive.AttemptResult{Failure: a.failure, Class: class, Outcome: ctl, Usage: adaptive.Usage{Sent: a.failure != adaptive.AttemptConnect}}
	d := s.decide(st, now, r)
	if d.Retry {
		a.attempt.Finish(now, r)
		st.endAttemptSpan(o, d.Reason)
	}
	return o, ctl, d
}

// answerFailed decides about an answer read whole (or as much as fits)
// before anything reached the client: it applies the provider's rate-limit
// headers and, for a failure a retry may fix (429, 503, 529, 5xx), asks
// the retry policy. On a retry the attempt is finished, its span ended and
// its connection closed; the answer is kept (forward relays it if no other
// attempt can be made).
func (s *Server) answerFailed(st *stream, complete bool) adaptive.RetryDecision {
	a := &st.adm
	if st.status >= 400 && complete {
		a.class = feedback.ClassifyError(st.status, st.respBuf)
	}
	st.learnHeaders(a.class)
	if st.status < 429 || !complete {
		return adaptive.RetryDecision{}
	}
	now := s.now()
	ra := feedback.RetryAfter(st.resp.Header.Peek("Retry-After"), st.resp.Header.Peek("Retry-After-Ms"), now)
	ctl := st.answerOutcome(a.class, ra)
	r := adaptive.AttemptResult{Status: st.status, Class: a.class, RateLimitHeaders: a.rlHeaders, Outcome: ctl, Usage: adaptive.Usage{Sent: true}}
	d := s.decide(st, now, r)
	if d.Retry {
		a.attempt.Finish(now, r)
		st.endAttemptSpan(outComplete, d.Reason)
		// Closed, not pooled: servers often close after an error answer,
		// and the retry must not meet a stale connection.
		st.closeUpstream(false)
	}
	return d
}

// decide asks the provider's retry policy about the failed attempt r.
func (s *Server) decide(st *stream, now time.Time, r adaptive.AttemptResult) adaptive.RetryDecision {
	if st.gone.Load() {
		return adaptive.RetryDecision{}
	}
	set := st.prov.adm.Upstreams
	return st.prov.adm.Retry.Decide(now, r, adaptive.RetryContext{
		Attempts:     st.adm.attempts,
		Deadline:     st.totalDeadline,
		Alternatives: set.HasAlternative(now, st.adm.attempt.Upstream()),
	})
}

// learnHeaders applies the provider's rate-limit headers of the current
// answer (status st.status, error class class) to its upstream's quota
// for the request's account and model, when the provider's headers are
// followed, and notes that the answer carried them (a 429 with them is
// the account's refusal: adaptive.StatusAccountLimited). Header names are
// only looked at (one byte, mostly) unless the answer carries rate-limit
// headers: then the clock is read and they are parsed.
func (st *stream) learnHeaders(class feedback.ErrorClass) {
	st.adm.rlHeaders = false
	if !st.prov.adm.Upstreams.Follow() {
		return
	}
	found := false
	for k := range st.resp.Header.All() {
		if feedback.IsRateLimitHeader(k) {
			found = true
			break
		}
	}
	if !found {
		return
	}
	now := st.srv.now()
	limits := &st.adm.rateLimits
	*limits = feedback.RateLimits{}
	for k, v := range st.resp.Header.All() {
		limits.Header(k, v, now)
	}
	if limits.Any() {
		st.adm.rlHeaders = true
		var ra time.Duration
		if st.status == fasthttp.StatusTooManyRequests {
			ra = feedback.RetryAfter(st.resp.Header.Peek("Retry-After"), st.resp.Header.Peek("Retry-After-Ms"), now)
		}
		st.adm.attempt.Learn(now, st.status, class, limits, ra)
	}
}

// goneOutcome is how a request ends whose client left, or that shutdown
// cut, between attempts.
func (st *stream) goneOutcome() outcome {
	if st.cut.Load() {
		return outShutdown
	}
	return outClientGone
}

// releaseBody gives back the request body (and its budget) once no retry
// can need it any more.
func (st *stream) releaseBody() {
	st.adm.keepBody = false
	st.releaseRequestBody()
}

// nameUpstream sets HeaderUpstream on an answer relayed from the current
// attempt's upstream, for a provider configured with upstreams:.
func (st *stream) nameUpstream(h *fasthttp.ResponseHeader) {
	if st.prov.named && st.adm.target != nil {
		h.SetBytesKV(hdrUpstream, st.adm.target.nameHdr)
	}
}
