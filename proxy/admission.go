package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/settings"
)

// admission is a request's state in its provider's admission stack,
// pooled with the stream: its rate reservation, its current upstream
// attempt and what the request path knows about it.
type admission struct {
	// reservation is the request's rate reservation; reserved says it holds one
	// (the rate layer is skipped when nothing could limit the request).
	reservation adaptive.Reservation
	reserved    bool
	// poolShort: the rate layer refused from this replica's pool of a
	// fleet-wide quota (adaptive.RateDecision.Retry): worth trying again
	// after retryAfter, within queue.max_wait.
	poolShort bool
	// attempt is the current upstream attempt (Pick fills it; Finish ends
	// it, exactly once); target is where it goes.
	attempt adaptive.Attempt
	target  *upstream
	// attempts is the number of attempts made; sent says one reached an
	// upstream (its request was written), so the request counts in the
	// rate quotas.
	attempts int
	sent     bool
	// failure is how the current attempt failed before an answer, and
	// class the error class of its answer (buffered answers).
	failure adaptive.AttemptFailure
	class   feedback.ErrorClass
	// start is when the current attempt was sent: its TTFT counts from
	// there.
	start time.Time
	// retryAfter is the Retry-After of Sluice's own answer when it is
	// computed for this request (raComputed rows).
	retryAfter time.Duration
	// keepBody holds the request body (and its budget) for a possible
	// retry after the attempt that wrote it.
	keepBody bool
	// rateLimits is the provider's rate-limit headers of the current answer;
	// rlHeaders says it carried some (the provider's headers followed).
	rateLimits feedback.RateLimits
	rlHeaders  bool
	// quotaKey is the provider's quota the request spends: its account
	// and model (quotaKeyOf).
	quotaKey adaptive.QuotaKey
	// deadline is how long the request may wait in all, for its rate and
	// then its permit (Server.deadline), read once before the rate layer.
	deadline time.Duration
}

// keyHasher hashes clients' keys for per-client rate limits. One seed per
// process: a hash never leaves the process, and raw keys are never kept.
var keyHasher = adaptive.NewKeyHasher()

// clientID says where a client's identity comes from for per-client rate
// limits (rate.per_client.key).
type clientID struct {
	on     bool
	header []byte // key: header: the header's name; nil: the API key
}

func clientIDOf(r settings.Rate) clientID {
	pc := r.PerClient
	if !pc.PerMinute.Any() {
		return clientID{}
	}
	id := clientID{on: true}
	if pc.Key == settings.ClientKeyHeader {
		id.header = []byte(pc.Header)
	}
	return id
}

// of returns the client's key in h: the configured header's value, or its
// credential (Authorization, else x-api-key) as sent. A client without one
// shares the empty key's quota with the others without one.
func (c clientID) of(h *fasthttp.RequestHeader) []byte {
	if c.header != nil {
		return h.PeekBytes(c.header)
	}
	if v := h.PeekBytes(hdrAuthz); len(v) > 0 {
		return v
	}
	return h.PeekBytes(hdrXAPIKey)
}

// reserveRate claims the request's demand on its provider's quotas: the
// provider's rate:, its client's rate.per_client, and an upstream's
// (configured or learned from the provider's headers). It is skipped when
// nothing could limit the request (adaptive.Rates.Needed). It returns how
// long the request must wait before going on, or the outcome to end with:
// rate_limit_<scope> (429, Retry-After from the buckets) or over_quota.
// The wait must fit in what is left of the request's deadline after spent.
func (s *Server) reserveRate(ctx *fasthttp.RequestCtx, st *stream, now time.Time, spent time.Duration) (time.Duration, outcome, bool) {
	p := st.prov
	rates := p.adm.Rates
	cq := p.policies[st.id.pol.idx].quota
	if cq == nil && !rates.Needed(p.adm.Upstreams) {
		return 0, 0, true
	}
	var key uint64
	if p.clientID.on {
		key = keyHasher.Sum(p.clientID.of(&ctx.Request.Header))
	}
	d := rates.Demand(st.info.PromptTokens, st.info.MaxTokens)
	d.Key = st.adm.quotaKey
	dec := rates.ReserveFor(now, key, cq, d, p.adm.Upstreams, max(st.adm.deadline-spent, 0), &st.adm.reservation)
	st.adm.poolShort = false
	switch {
	case dec.TooLarge:
		return 0, outOverQuota, false
	case dec.Limited:
		st.adm.retryAfter, st.adm.poolShort = dec.RetryAfter, dec.Retry
		switch dec.Scope {
		case adaptive.ScopeClient:
			return 0, outRateLimitedClient, false
		case adaptive.ScopeUpstream:
			return 0, outRateLimitedUpstream, false
		}
		return 0, outRateLimitedProvider, false
	}
	st.adm.reserved = true
	return dec.Wait, 0, true
}

// reserveRateFleet is reserveRate, trying again while the refusal came
// from this replica's pool of a fleet-wide quota (Redis is never asked on
// the request path; the pool is refilled by the fleet coordinator, which
// the refusal woke) and the wait fits in the request's deadline. It returns the
// reservation's wait and how long was spent retrying; the connection is
// watched from its first retry on (watched).
func (s *Server) reserveRateFleet(ctx *fasthttp.RequestCtx, st *stream, now time.Time) (wait, spent time.Duration, o outcome, ok, watched bool) {
	st.adm.quotaKey = st.prov.quotaKeyOf(&ctx.Request.Header, st.info.Model)
	st.adm.deadline = s.deadline(st, &ctx.Request.Header)
	wait, o, ok = s.reserveRate(ctx, st, now, 0)
	for !ok && st.adm.poolShort && spent+max(st.adm.retryAfter, time.Millisecond) <= st.adm.deadline {
		if !watched {
			s.watch.add(st, ctx.Conn(), ctx.ConnID())
			watched = true
		}
		d := max(st.adm.retryAfter, time.Millisecond)
		if o, ok = s.waitRate(st, d); !ok {
			return 0, spent, o, false, watched
		}
		spent += d
		wait, o, ok = s.reserveRate(ctx, st, s.now(), spent)
	}
	return wait, spent, o, ok, watched
}

// waitRate waits d, the time until the request's rate reservation is due,
// unless the client leaves or shutdown cuts it first.
func (s *Server) waitRate(st *stream, d time.Duration) (outcome, bool) {
	if !st.sleep(d) {
		if st.cut.Load() {
			return outRejectedShutdown, false
		}
		return outQueuedClientGone, false
	}
	return 0, true
}

// sleep waits d; it returns false early when the client leaves or
// shutdown cuts the request.
func (st *stream) sleep(d time.Duration) bool {
	if d <= 0 {
		return !st.gone.Load()
	}
	cancel, alive := st.waitChan()
	if !alive {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return !st.gone.Load()
	case <-cancel:
		return false
	}
}

// settle ends the request in its admission stack, in this order: its
// current attempt (the upstream's slot, breaker, quota claim), its rate
// reservation (what it used, exactly), then its permit with the
// controller's outcome ctl. Called once, from the request's one exit
// (Server.end), or where a buffered answer frees its permit before it is
// written (relay).
func (st *stream) settle(now time.Time, o outcome, ctl adaptive.Outcome) {
	a := &st.adm
	if a.attempt.Held() {
		a.attempt.Finish(now, st.attemptResult(o, ctl))
	}
	if a.reserved {
		a.reservation.Settle(now, st.usage())
		a.reserved = false
	}
	ctl.Tokens = st.tokenCost() // the fair queue's cost, settled to actual usage
	st.permit.Finish(now, ctl)
}

// usage is what the request used, for its rate quotas: nothing when no
// attempt reached an upstream; else one request, the provider's reported
// input tokens (or the estimate, for an answer that reported none) and the
// output tokens metered. An error answer used no tokens.
func (st *stream) usage() adaptive.Usage {
	u := adaptive.Usage{Sent: st.adm.sent}
	if !u.Sent || !st.metered || st.status/100 != 2 {
		return u
	}
	r := st.meter.Result()
	u.InputTokens, u.OutputTokens = r.InputTokens, r.OutputTokens
	if u.InputTokens == 0 {
		u.InputTokens = st.info.PromptTokens
	}
	return u
}

// attemptResult is how the current attempt ended when the request ends
// with outcome o and controller outcome ctl: what its upstream's breaker,
// controller and quota learn.
func (st *stream) attemptResult(o outcome, ctl adaptive.Outcome) adaptive.AttemptResult {
	r := adaptive.AttemptResult{Status: st.status, Class: st.adm.class, RateLimitHeaders: st.adm.rlHeaders, Outcome: ctl, Usage: st.usage()}
	if st.metered && st.streamed {
		r.Class = st.meter.Result().ErrorClass
	}
	switch o {
	case outComplete:
	case outUpstreamUnreachable:
		r.Failure = st.adm.failure
	case outFirstTokenTimeout:
		r.Failure, r.Class = adaptive.AttemptTimeout, feedback.ErrTimeout
	case outIdleTimeout, outUpstreamBroke, outBadUpstreamBody:
		r.Failure = adaptive.AttemptBroke
	default: // the client left, shutdown, a slow client, a long answer
		r.Failure = adaptive.AttemptCanceled
	}
	r.Usage.Sent = r.Failure != adaptive.AttemptConnect && st.adm.sent
	return r
}
