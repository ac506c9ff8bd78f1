package adaptive

import (
	"github.com/sluicehq/sluice/adaptive/control"
	"sync/atomic"
	"time"
)

// Permit states.
const (
	permitFree uint32 = iota // never granted, or reset for reuse
	permitHeld               // granted, not finished
	permitDone               // finished: released and its outcome fed
)

// Permit flags: what the controller already heard about this request.
const (
	flagFirstToken uint32 = 1 << iota // a FirstToken sample was fed: the loss part counted a success
	flagDropped                       // a drop was fed: at most one per request
	flagDecoded                       // its count in decoding was taken back (endDecoding)
	flagPacing                        // an attempt waits for its dispatch slot (Attempt.Pace)
)

// startDecoding counts a request whose first token was just fed in n, the
// requests of a limiter or upstream past their first token. If the
// request finished meanwhile (state no longer held), whichever of this and
// its Finish comes second takes the count back, so it is taken back once.
func startDecoding(state, flags *atomic.Uint32, n *atomic.Int64) {
	n.Add(1)
	if state.Load() != permitHeld {
		endDecoding(flags, n)
	}
}

// endDecoding takes a finished request's count in n back, once, if it was
// counted (startDecoding).
func endDecoding(flags *atomic.Uint32, n *atomic.Int64) {
	if flags.Load()&flagFirstToken != 0 && setFlag(flags, flagDecoded) {
		n.Add(-1)
	}
}

// Permit is one request's right to be in flight at its provider. It is
// granted by Limiter.TryAcquire or Limiter.Acquire, fed samples with
// Observe while the request runs, and ended with Finish, which releases it
// and feeds the request's outcome to the controller in one step: a caller
// cannot release without telling the controller how the request ended, nor
// do either twice. Finish may race with itself (the owner ending a stream,
// a disconnect watcher or shutdown interrupting it): exactly one call wins.
//
// A Permit is owned by one request. It is not copied once granted (it holds
// atomics; go vet reports copies) and may be reused for another request
// once finished, which makes it poolable with the request's state.
type Permit struct {
	lim     *Limiter
	granted time.Time
	// sent is when the request was sent upstream, and inflight the
	// permits in use then, this one included, not counting requests
	// waiting for a dispatch slot: the grant, unless the request waited
	// for its slot (Attempt.Paced).
	sent     time.Time
	inflight int
	waited   time.Duration
	t        *tenant
	cls      *classState
	level    uint8 // queue level of the request's flow
	cost     int64 // estimated tokens it was charged (Limiter.flowCost)
	prompt   int64 // the prompt part of cost
	refusal  Refusal
	state    atomic.Uint32
	flags    atomic.Uint32
	lease    atomic.Uint64 // fleet lease slot (lease.go)
	leaser   Leaser        // where the lease came from
}

// grant initialises p for a new request. The state is stored last: a
// concurrent Finish that sees permitHeld sees the fields too.
func (p *Permit) grant(l *Limiter, at time.Time, inflight int, waited time.Duration, t *tenant, cls *classState, level uint8, prompt, cost int64) {
	if p.state.Load() == permitHeld {
		panic("adaptive: permit granted while still held")
	}
	p.lim, p.granted, p.sent, p.inflight, p.waited = l, at, at, inflight, waited
	p.t, p.cls, p.level, p.prompt, p.cost, p.refusal = t, cls, level, prompt, cost, Refusal{}
	p.flags.Store(0)
	if p.lease.Load() != leaseNone { // a load, not a store: admission without a fleet pays no locked instruction
		p.lease.Store(leaseNone)
	}
	p.state.Store(permitHeld)
}

// Refusal describes the last refusal of Acquire for this permit's
// request: whether its flow was over its share and when to retry. It is
// meaningful only after Acquire returned an error.
func (p *Permit) Refusal() Refusal { return p.refusal }

// Held reports whether p was granted and not finished yet.
func (p *Permit) Held() bool { return p.state.Load() == permitHeld }

// Granted is when the permit was handed out (zero if never).
func (p *Permit) Granted() time.Time { return p.granted }

// Inflight is the number of permits in use right after this one was
// granted, this one included (or, for a request that waited for its
// dispatch slot, when it was sent, not counting those still waiting).
func (p *Permit) Inflight() int { return p.inflight }

// Room reports whether its provider's permits in use, p's included, are
// within the limit: whether a retry of p's request may be sent now. A
// permit is not taken back when the limit is cut below the count in use,
// so right after a refusal the requests already in flight are over it,
// and a retry sent then reaches a provider that has just said it has no
// room. Lock-free.
func (p *Permit) Room() bool {
	return p.lim.inflight.Load() <= p.lim.limit.Load()
}

// Waited is how long the request waited in the queue (0 on the fast path).
func (p *Permit) Waited() time.Duration { return p.waited }

// Observe feeds the controller a sample about the request holding p while
// it runs: FirstToken, TokenRate, or Dropped (a congestion signal seen
// mid-stream, such as a first-token timeout or an overloaded error event).
// Dispatched and InflightAtDispatch are taken from p; Now defaults to the
// limiter's clock. It does nothing once p is finished, and a second
// Dropped sample for the same request is ignored: one request is at most
// one congestion event. It reports whether the sample was fed.
func (p *Permit) Observe(s control.Sample) bool {
	if p.state.Load() != permitHeld {
		return false
	}
	switch s.Kind {
	case control.FirstToken:
		if p.setFlag(flagFirstToken) {
			startDecoding(&p.state, &p.flags, &p.lim.decoding)
		}
	case control.Dropped:
		if !p.setFlag(flagDropped) {
			return false
		}
	}
	p.lim.observe(p, s)
	return true
}

// setFlag sets f and reports whether it was not set before.
func (p *Permit) setFlag(f uint32) bool {
	for {
		old := p.flags.Load()
		if old&f != 0 {
			return false
		}
		if p.flags.CompareAndSwap(old, old|f) {
			return true
		}
	}
}

// OutcomeKind is how a request ended as the controller hears it; the three
// kinds are the three ways go-concurrency-limits' Listener ends a request.
type OutcomeKind uint8

const (
	// OutcomeIgnore says nothing about the provider's capacity: the client
	// went away, shutdown cut the request, a client error (4xx other than
	// 429), a 500, an idle timeout after the first token.
	OutcomeIgnore OutcomeKind = iota
	// OutcomeSuccess: the provider served the request. When no first
	// token was observed (a non-streaming answer), the loss part counts
	// one success; a stream's success was counted at its first token.
	OutcomeSuccess
	// OutcomeDrop: the provider signalled congestion (429 rate limit, 529,
	// 503, first-token timeout). Fed as a Dropped sample unless the
	// request already reported one.
	OutcomeDrop
)

// Outcome is how a request ended, for Finish.
type Outcome struct {
	Kind OutcomeKind
	// Drop is the kind of congestion signal (OutcomeDrop).
	Drop control.DropKind
	// RetryAfter is how long the provider asked to wait (OutcomeDrop; 0 =
	// not said). It freezes limit growth until then.
	RetryAfter time.Duration
	// Tokens is the request's actual usage (input plus output tokens),
	// when known; 0 keeps the estimate it was admitted with (Flow.Prompt
	// and Flow.MaxOutput, Limiter.flowCost).
	// Fair sharing between tenants is settled with it.
	Tokens int
}

// Finish ends the request holding p at now: it feeds the outcome to the
// controller, settles the request's token cost (o.Tokens), then releases
// the permit (so a cut applies before the freed slot is handed to a
// waiter), then returns its fleet lease if it holds one (Lease). Exactly
// once: it returns false, and does
// nothing, when p is not held (never granted, or finished already).
func (p *Permit) Finish(now time.Time, o Outcome) bool {
	if !p.state.CompareAndSwap(permitHeld, permitDone) {
		return false
	}
	l := p.lim
	streamed := p.flags.Load()&flagFirstToken != 0
	switch o.Kind {
	case OutcomeSuccess:
		if !streamed {
			l.observe(p, control.Sample{Kind: control.Answered, Now: now})
		}
	case OutcomeDrop:
		if p.setFlag(flagDropped) {
			l.observe(p, control.Sample{Kind: control.Dropped, Now: now, Drop: o.Drop, RetryAfter: o.RetryAfter})
		}
	}
	if streamed {
		// A first token fed after the load above is taken back by
		// startDecoding itself: the permit is no longer held.
		endDecoding(&p.flags, &l.decoding)
	}
	l.release(p, now, o.Tokens)
	if p.lease.Load() != leaseNone { // inlined check: no call without a fleet lease
		p.endLease()
	}
	return true
}
