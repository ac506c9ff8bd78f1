package adaptive

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/feedback"
)

// AttemptFailure is how an upstream attempt failed before or instead of
// an HTTP answer.
type AttemptFailure uint8

const (
	// AttemptOK: the upstream answered (any status; see Status and Class).
	AttemptOK AttemptFailure = iota
	// AttemptConnect: no connection (dial, TLS); nothing was sent.
	AttemptConnect
	// AttemptReset: the connection broke before the response headers.
	AttemptReset
	// AttemptTimeout: no headers or no first token within
	// timeouts.first_token (or no whole answer within timeouts.total).
	AttemptTimeout
	// AttemptBroke: the connection broke after the headers, mid-body.
	AttemptBroke
	// AttemptCanceled: the client left or shutdown cut the attempt; it
	// says nothing about the upstream.
	AttemptCanceled
)

// AttemptResult is how one upstream attempt ended: what the breaker, the
// retry policy, the upstream's adaptive limit and its rate quota learn
// from it.
type AttemptResult struct {
	Failure AttemptFailure
	// Status is the upstream's HTTP status (0 without an answer).
	Status int
	// Class is feedback.ClassifyError's class of the error body or
	// mid-stream error event (ErrNone for a clean answer; ErrTimeout for a
	// first-token timeout).
	Class feedback.ErrorClass
	// RateLimitHeaders: the answer carried the provider's rate-limit
	// headers (x-ratelimit-*, anthropic-ratelimit-*), read when they are
	// followed. A 429 with them is the account's refusal (see
	// StatusAccountLimited).
	RateLimitHeaders bool
	// Outcome is what the upstream's controller hears: the same outcome
	// the proxy gives Permit.Finish for an attempt ending this way
	// (RetryAfter included).
	Outcome Outcome
	// Usage is what the attempt used, from the metered usage (or the
	// estimate and the counted output when the provider reported none).
	// Sent is false when the request never reached the upstream.
	Usage Usage
}

// Attempt is one upstream attempt of a request: the upstream chosen by
// Pick, a slot of its in-flight count, a pass through its breaker, and
// its claim on the upstream's quota. Like a Permit it lives in the
// request's state, is fed samples while it runs and ends with one Finish,
// which settles everything it holds; Finish may race with itself and
// exactly one call wins. It may be reused once finished.
type Attempt struct {
	set    *UpstreamSet
	up     *Upstream
	permit *Permit
	// key is the provider's quota the request spends (its account and
	// model); mq, while held, is that quota at up, which claim is on.
	key    QuotaKey
	mq     *modelQuota
	claim  claim
	ticket Ticket
	start  time.Time
	// inflight is the upstream's in-flight count right after this attempt
	// took its slot, this one included.
	inflight int
	number   int
	failover bool
	// shared: the upstream's controller is the provider limiter's (a set
	// of one built by a Registry): samples go through the permit only.
	shared bool
	state  atomic.Uint32 // permitFree, permitHeld, permitDone
	flags  atomic.Uint32 // flagFirstToken, flagDropped
}

// Held reports whether a was picked and not finished yet.
func (a *Attempt) Held() bool { return a.state.Load() == permitHeld }

// Upstream is the upstream the attempt goes to (nil before Pick).
func (a *Attempt) Upstream() *Upstream { return a.up }

// Number is the attempt's number within its request, from 1.
func (a *Attempt) Number() int { return a.number }

// Failover reports whether the attempt went to another upstream than the
// request's rate reservation was bound to, or than its failed previous
// attempt (metrics count failovers).
func (a *Attempt) Failover() bool { return a.failover }

// Probe reports whether the attempt is a half-open breaker probe.
func (a *Attempt) Probe() bool { return a.ticket.probe }

// SetQuotaKey names the provider's quota the request spends (its account
// and model), for an attempt picked without a rate reservation (with one,
// Pick takes the reservation's key). Call it before Pick.
func (a *Attempt) SetQuotaKey(k QuotaKey) { a.key = k }

// Learn applies the provider's rate-limit headers from the attempt's
// response to its upstream's quota for the request's account and model
// (see Quota.learn). Call it once the response headers are in, before
// Finish, with the response's status and error class, and its
// Retry-After (0: none): a 429 for the provider's rate limit means it
// counted nothing for the request, which then gets its quota back when it
// finishes, and a Retry-After on it holds that quota until then (the
// account's refusal is its quota's, not the provider's capacity). It
// reports whether anything was applied; it does nothing when the
// provider's headers are ignored.
//
// An attempt that holds no claim (its upstream's quota was off when it
// was picked: nothing configured or learned) turns the quota on with what
// the headers say (see Quota.learnFirst).
func (a *Attempt) Learn(now time.Time, status int, class feedback.ErrorClass, rl *feedback.RateLimits, retryAfter time.Duration) bool {
	if a.state.Load() != permitHeld || !a.set.follow.Load() {
		return false
	}
	t := a.up.accts.Load()
	refused := MeaningOf(AttemptResult{Status: status, Class: class, RateLimitHeaders: rl.Any()}).QuotaRefund
	var applied bool
	if a.claim.state == claimNone {
		mq := t.acquire(now, a.key)
		if mq == nil {
			return false
		}
		applied = mq.q.learnFirst(now, a.start, rl)
		if applied && refused && retryAfter > 0 {
			mq.q.holdUntil(now, retryAfter)
		}
		mq.release()
	} else {
		q := a.claim.q
		applied = q.learn(now, &a.claim, refused, rl)
		if refused && retryAfter > 0 && rl.Any() {
			q.holdUntil(now, retryAfter)
		}
	}
	if applied && !t.learned.Load() { // a load, not a store, once set
		t.learned.Store(true)
	}
	return applied
}

// Observe feeds a sample about the running attempt (FirstToken,
// TokenRate, Dropped; at most one drop) to its upstream's controller and
// to the request's provider permit: the permit counts the drop and lets
// the provider's limiter take up the new sum of its upstreams' limits.
// With one upstream, whose controller is the provider limiter's, the
// permit alone feeds it. Dispatched and InflightAtDispatch are the
// attempt's for the upstream's controller, the permit's for the
// provider's. It reports whether the sample was fed.
func (a *Attempt) Observe(s control.Sample) bool {
	if a.state.Load() != permitHeld {
		return false
	}
	switch s.Kind {
	case control.FirstToken:
		if setFlag(&a.flags, flagFirstToken) {
			startDecoding(&a.state, &a.flags, &a.up.decoding)
		}
	case control.Dropped:
		if !setFlag(&a.flags, flagDropped) {
			return false
		}
	}
	if s.Now.IsZero() {
		s.Now = a.set.clk.Now()
	}
	if !a.shared || a.permit == nil {
		a.observeCtrl(s)
	}
	if p := a.permit; p != nil {
		p.Observe(s)
	}
	return true
}

// Pace takes the attempt's dispatch slot at now when its upstream's
// controller spaces dispatches (Pacer: the provider refused for a request
// rate), if the slot comes within at most within, and returns how long
// the attempt must wait before it is sent (0: send it now). A slot
// further away is not taken: ok is false, with the wait it would have
// had. The attempt keeps its slot in flight while it waits; call Paced
// when the wait is over, whether it is then sent or not (Finish does it
// too).
func (a *Attempt) Pace(now time.Time, within time.Duration) (wait time.Duration, ok bool) {
	if a.state.Load() != permitHeld {
		return 0, true
	}
	b := a.up.ctrl.Load()
	if b == nil || b.p == nil {
		return 0, true
	}
	w, ok := b.p.PaceWait(now, within)
	if ok && w > 0 && setFlag(&a.flags, flagPacing) {
		a.up.pacing.Add(1)
	}
	return w, ok
}

// Paced ends the attempt's wait for its dispatch slot: it is sent at now.
// Its samples then say it was dispatched at now, with the attempts in
// flight at its upstream that are not waiting for a slot; so do the
// permit's, when the upstream's controller is the provider limiter's.
// Requests waiting for a slot are not load on the provider, and counting
// them would let the loss part grow past what the provider serves.
func (a *Attempt) Paced(now time.Time) {
	if !a.unpace() {
		return
	}
	a.start = now
	a.inflight = int(max(a.up.inflight.Load()-a.up.pacing.Load(), 1))
	if p := a.permit; a.shared && p != nil && p.Held() {
		p.sent, p.inflight = now, int(max(p.lim.inflight.Load()-a.up.pacing.Load(), 1))
	}
}

// unpace takes the attempt's count out of its upstream's pacing count,
// once; it reports whether it was counted.
func (a *Attempt) unpace() bool {
	for {
		f := a.flags.Load()
		if f&flagPacing == 0 {
			return false
		}
		if a.flags.CompareAndSwap(f, f&^flagPacing) {
			a.up.pacing.Add(-1)
			return true
		}
	}
}

// refreshProvider makes the provider's limiter re-read its controller
// (the upstream set: the sum of its upstreams' limits), so a change of an
// upstream's limit or breaker reaches admission at once.
func (a *Attempt) refreshProvider() {
	if p := a.permit; p != nil && p.Held() && p.lim != nil {
		p.lim.setLimit(p.lim.controllerLimit())
	}
}

// Finish ends the attempt at now with r: it feeds r.Outcome to the
// upstream's controller (as Permit.Finish does for the provider), frees
// the upstream's in-flight slot, records the result with the breaker,
// settles the attempt's quota claim with r.Usage, counts it, and lets the
// provider's limiter take up the upstream's new limit. Exactly once: it
// returns false, and does nothing, when a is not held.
//
// A drop also goes to the request's provider permit (Observe), which
// counts it: a request retried after a 429 has told its provider about
// the 429 even when a later attempt succeeds. With one upstream, whose
// controller is the provider limiter's, the permit is the controller's
// only feed: the drop goes there, and a success is left to Permit.Finish.
func (a *Attempt) Finish(now time.Time, r AttemptResult) bool {
	if !a.state.CompareAndSwap(permitHeld, permitDone) {
		return false
	}
	a.unpace()
	direct := !a.shared || a.permit == nil // feed the upstream's controller here
	switch r.Outcome.Kind {
	case OutcomeSuccess:
		if direct && a.flags.Load()&flagFirstToken == 0 {
			a.observeCtrl(control.Sample{Kind: control.Answered, Now: now})
		}
	case OutcomeDrop:
		if setFlag(&a.flags, flagDropped) {
			s := control.Sample{Kind: control.Dropped, Now: now, Drop: r.Outcome.Drop, RetryAfter: r.Outcome.RetryAfter}
			if direct {
				a.observeCtrl(s)
			}
			if p := a.permit; p != nil {
				p.Observe(s)
			}
		}
	}
	u := a.up
	endDecoding(&a.flags, &u.decoding)
	u.inflight.Add(-1)
	m := MeaningOf(r)
	v := m.Breaker
	if v == verdictFailure && m.Busy && !a.set.HasAlternative(now, u) {
		// Busy, on the last upstream standing: the loss signal above cuts
		// its limit; opening its breaker would turn a provider that still
		// serves part of its load into one that serves none for open_time.
		// With another upstream usable, busy counts, and traffic moves.
		v = verdictNeutral
	}
	u.brk.record(now, a.ticket, v)
	if mq := a.mq; mq != nil {
		mq.q.settle(now, &a.claim, r.Usage)
		mq.release()
		a.mq = nil
	}
	u.count(v)
	if !a.shared {
		a.refreshProvider()
	}
	return true
}

func (a *Attempt) observeCtrl(s control.Sample) {
	s.Dispatched, s.InflightAtDispatch = a.start, a.inflight
	s.Decoding = int(a.up.decoding.Load())
	if s.Now.IsZero() {
		s.Now = a.set.clk.Now()
	}
	if b := a.up.ctrl.Load(); b != nil {
		b.c.Observe(s)
	}
}

// setFlag sets f in flags and reports whether it was not set before.
func setFlag(flags *atomic.Uint32, f uint32) bool {
	for {
		old := flags.Load()
		if old&f != 0 {
			return false
		}
		if flags.CompareAndSwap(old, old|f) {
			return true
		}
	}
}
