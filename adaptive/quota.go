package adaptive

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive/internal/bucket"
	"github.com/sluicehq/sluice/settings"
)

// Dim is one dimension a rate limit counts.
type Dim uint8

const (
	DimRequests Dim = iota // requests per window
	DimTokens              // input and output tokens together
	DimInput               // input (prompt) tokens
	DimOutput              // output tokens
	// NumDims bounds Dim values, for arrays indexed by dimension.
	NumDims
)

// String returns the metric label value of d.
func (d Dim) String() string {
	switch d {
	case DimRequests:
		return "requests"
	case DimTokens:
		return "tokens"
	case DimInput:
		return "input_tokens"
	case DimOutput:
		return "output_tokens"
	}
	return "unknown"
}

// maxCost bounds one request's count in any dimension, so that a
// malformed estimate or usage report cannot overflow the arithmetic.
const maxCost = 1 << 40

// Demand is what a request may use, estimated before it is sent: the
// prompt estimate and the most output it may produce (the request's own
// max_tokens, or a configured default). Negative values count as 0.
type Demand struct {
	InputTokens  int
	OutputTokens int
	// Key names the provider's quota the request spends (its account and
	// model): the upstreams' learned quotas are kept per key.
	Key QuotaKey
}

// Usage is what a request used, metered when it ended. Sent says whether
// it reached the provider at all: a request refused before it was sent
// (rejected, canceled while waiting, connect error) used nothing, not
// even a request.
type Usage struct {
	Sent         bool
	InputTokens  int
	OutputTokens int
}

type costs [NumDims]int64

func clampCost(n int) int64 { return min(max(int64(n), 0), maxCost) }

func (d Demand) costs() costs {
	in, out := clampCost(d.InputTokens), clampCost(d.OutputTokens)
	return costs{1, in + out, in, out}
}

func (u Usage) costs() costs {
	if !u.Sent {
		return costs{}
	}
	in, out := clampCost(u.InputTokens), clampCost(u.OutputTokens)
	return costs{1, in + out, in, out}
}

// Limits are the per-minute limits of a quota, one per dimension; 0 means
// no limit on that dimension.
type Limits struct {
	Requests, Tokens, InputTokens, OutputTokens int64
	// RequestWindow is the window requests are counted over: the
	// requests bucket holds Requests x RequestWindow / 1m (at least 1)
	// and refills at Requests per minute. 0 (or a minute) is a minute's
	// burst; a provider that enforces its requests per minute over a few
	// seconds (Azure OpenAI: 1 or 10 s) refuses a minute's burst.
	RequestWindow time.Duration
}

// perMinute returns the limits of p, requests counted over requestWindow
// (0: a minute).
func perMinute(p settings.PerMinute, requestWindow time.Duration) Limits {
	return Limits{
		Requests: int64(p.RPM), Tokens: int64(p.TPM), InputTokens: int64(p.InputTPM), OutputTokens: int64(p.OutputTPM),
		RequestWindow: requestWindow,
	}
}

// OwnLimits are the provider's own limits of a rate block.
func OwnLimits(s settings.Rate) Limits { return perMinute(s.PerMinute, s.RequestWindow) }

// clientLimits are each client's limits of a rate block.
func clientLimits(s settings.Rate) Limits { return perMinute(s.PerClient.PerMinute, s.RequestWindow) }

func (l Limits) of(d Dim) int64 {
	switch d {
	case DimRequests:
		return l.Requests
	case DimTokens:
		return l.Tokens
	case DimInput:
		return l.InputTokens
	}
	return l.OutputTokens
}

// Any reports whether any dimension is limited.
func (l Limits) Any() bool {
	return l.Requests != 0 || l.Tokens != 0 || l.InputTokens != 0 || l.OutputTokens != 0
}

// bucketOf is the capacity and window of dimension d's bucket for a limit
// of n per minute: a minute's worth, except requests over RequestWindow.
func (l Limits) bucketOf(d Dim, n int64) (int64, time.Duration) {
	if w := l.RequestWindow; d == DimRequests && w > 0 && w < rateWindow {
		return max((n*int64(w)+int64(rateWindow)-1)/int64(rateWindow), 1), w
	}
	return n, rateWindow
}

// Quota is one set of rate buckets: a provider's, one client key's, or
// one upstream's. Each limited dimension is a bucket holding a window's
// worth of its limit, refilled continuously.
//
// A quota is Sluice's own policy (the provider's and clients' rate:
// blocks) or a mirror of a provider's quota for one upstream. They differ
// in how a request that used less than it reserved is settled:
//
//   - Own quotas are exact. The difference is refunded, a request that
//     used more is charged the excess, and a request that was never sent
//     gets everything back.
//   - A mirror counts the way providers do: what a request may use is
//     taken when it is sent and not given back (a provider that gives it
//     back says so in its next remaining count, see Quota.learn). Excess
//     use is still charged; a request that was never sent, or that the
//     provider refused for its rate limit, gets everything back.
//
// All methods are safe for concurrent use, lock-free and allocation-free
// (a resize allocates).
type Quota struct {
	clk bucket.Clock
	b   [NumDims]bucket.Bucket
	m   *mirror // nil for an own quota
	// fleet, when set, shares the quota across a fleet of replicas
	// (rate_fleet.go): the provider's own quota, once a coordinator joined
	// it to the fleet. nil otherwise.
	fleet atomic.Pointer[fleetQuota]
}

// window of every configured limit: limits are per minute.
const rateWindow = time.Minute

// initQuota makes q a quota with limits at now (full buckets). epoch is
// the time origin of its buckets (any time near now).
func (q *Quota) initQuota(now time.Time, epoch time.Time, l Limits, mirrored bool) {
	q.clk = bucket.Clock{Epoch: epoch}
	switch {
	case !mirrored:
		q.m = nil
	case q.m != nil:
		*q.m = mirror{} // a place reused for another account or model
	default:
		q.m = newMirror()
	}
	nt := q.clk.Ticks(now)
	for d := range NumDims {
		q.b[d].Stop()
		if n := l.of(d); n > 0 {
			c, w := l.bucketOf(d, n)
			q.b[d].Start(nt, c, w)
		}
	}
}

// configure applies new limits at now, keeping each bucket's tokens in
// use. On an own quota a dimension set to 0 is turned off. On a mirror a
// configured limit is the starting point (the provider's headers may
// correct it later), and 0 leaves what was learned in place.
func (q *Quota) configure(now time.Time, l Limits) {
	nt := q.clk.Ticks(now)
	for d := range NumDims {
		n := l.of(d)
		switch {
		case n > 0:
			c, w := l.bucketOf(d, n)
			q.b[d].Resize(nt, c, w)
		case q.m == nil:
			q.b[d].Stop()
		}
	}
	if f := q.fleet.Load(); f != nil {
		f.configured(q, nt, l)
	}
}

// Level reports the tokens (or requests) left in dimension d at now and
// its capacity; ok is false when d is not limited. A negative level is
// debt: a request used more than it reserved.
func (q *Quota) Level(now time.Time, d Dim) (level, capacity int64, ok bool) {
	if f := q.fleet.Load(); f != nil && f.leased.Load() {
		return f.levelLeased(q, d)
	}
	return q.b[d].Level(q.clk.Ticks(now))
}

// full reports whether every limited dimension of q is at its capacity
// at now: nothing is reserved and no debt is left.
func (q *Quota) full(now time.Time) bool {
	for d := range NumDims {
		if lv, c, ok := q.Level(now, d); ok && lv < c {
			return false
		}
	}
	return true
}

// on reports whether any dimension of q is limited. Requests that skip the
// rate layer (Rates.Needed) take no claim on a mirror that is off (nothing
// configured, nothing learned yet); the first response that reports a
// limit turns it on (Quota.learnFirst).
func (q *Quota) on() bool {
	for d := range NumDims {
		if q.b[d].On() {
			return true
		}
	}
	return false
}

// Window reports the window of dimension d (0 when not limited): a
// minute for configured limits; learned from the provider's reset times
// on a mirror.
func (q *Quota) Window(d Dim) time.Duration {
	_, w := q.b[d].Params()
	return w
}

// claim is what one request took from one quota.
type claim struct {
	q     *Quota
	cost  costs
	taken uint8 // bit per dimension: reserved in that bucket
	state uint8 // claimNone, claimHeld or claimSent
	// leased: taken from the pools of a fleet-wide quota, not from its
	// buckets (rate_fleet.go).
	leased bool
	// refused: the provider refused the request for its rate limit (a
	// mirror learned it from the response; see learn).
	refused bool
	// mirror: the quota's sent count, by dimension, right after this
	// request was sent, and when.
	mark   costs
	sentAt time.Time
}

const (
	claimNone uint8 = iota
	claimHeld
	claimSent
)

// reserve takes cost from every limited dimension of q at now, if all of
// them can give it within maxWait; else none. It returns how long the
// caller must wait before sending (the longest of the dimensions), or,
// when it fails, how long until the cost would fit (0 and tooLarge when it
// never fits: it exceeds a capacity).
func (q *Quota) reserve(now time.Time, c *claim, cost costs, maxWait time.Duration) (wait time.Duration, ok, tooLarge bool) {
	if f := q.fleet.Load(); f != nil && f.leased.Load() {
		return q.reserveLeased(f, now, c, cost)
	}
	nt, mw := q.clk.Ticks(now), bucket.TicksOf(maxWait)
	m := q.m
	if m != nil {
		cost = m.scaled(cost)
		for d := range NumDims {
			m.reserved[d].Add(cost[d]) // before the buckets: see learn
		}
	}
	var taken uint8
	var longest int64
	for d := range NumDims {
		w, ok, tl, on := q.b[d].Reserve(nt, cost[d], mw)
		if !ok {
			q.undo(nt, taken, cost)
			if m != nil {
				for d := range NumDims {
					m.released[d].Add(cost[d])
				}
			}
			if tl || q.tooLarge(cost) {
				return 0, false, true
			}
			return bucket.DurationOf(q.waitScaled(nt, cost)), false, false
		}
		// A mirror's claim counts on every dimension, limited yet or not:
		// a limit learned later subtracts it from the level (as unseen),
		// so giving it back must add it again.
		if on || m != nil {
			taken |= 1 << d
		}
		longest = max(longest, w)
	}
	*c = claim{q: q, cost: cost, taken: taken, state: claimHeld}
	return bucket.DurationOf(longest), true, false
}

// tooLarge reports whether cost exceeds a dimension's capacity: it can
// never fit, whatever the levels (checked on every dimension, so that a
// request refused for an empty bucket is still told it is too large).
func (q *Quota) tooLarge(cost costs) bool {
	for d := range NumDims {
		if c, _ := q.b[d].Params(); c > 0 && cost[d] > c {
			return true
		}
	}
	return false
}

// undo gives back the dimensions in taken.
func (q *Quota) undo(nt int64, taken uint8, cost costs) {
	for d := range NumDims {
		if taken&(1<<d) != 0 {
			q.b[d].Adjust(nt, -cost[d])
		}
	}
}

// waitFor is how long until cost fits in every dimension (-1: never).
func (q *Quota) waitFor(nt int64, cost costs) int64 {
	if f := q.fleet.Load(); f != nil && f.leased.Load() {
		return f.waitFor(q, nt, cost)
	}
	if q.m != nil {
		cost = q.m.scaled(cost)
	}
	return q.waitScaled(nt, cost)
}

// waitScaled is waitFor for a cost already in the quota's units.
func (q *Quota) waitScaled(nt int64, cost costs) int64 {
	var longest int64
	for d := range NumDims {
		w := q.b[d].WaitFor(nt, cost[d])
		if w < 0 {
			return -1
		}
		longest = max(longest, w)
	}
	return longest
}

// sendClaim records that the request holding c was sent at now (mirror
// quotas only; a no-op otherwise or when c holds nothing).
func (q *Quota) sendClaim(now time.Time, c *claim) {
	if c.state != claimHeld {
		return
	}
	c.state = claimSent
	if q.m == nil {
		return
	}
	for d := range NumDims {
		c.mark[d] = q.m.sent[d].Add(c.cost[d])
	}
	c.sentAt = now
}

// settle ends c at now with what the request used (see Quota for how own
// quotas and mirrors differ), and empties c. Settling an empty claim does
// nothing.
func (q *Quota) settle(now time.Time, c *claim, u Usage) {
	if c.state == claimNone {
		return
	}
	if c.leased {
		q.settleLeased(c, u)
		*c = claim{}
		return
	}
	nt := q.clk.Ticks(now)
	used := u.costs()
	switch {
	case c.state == claimHeld && q.m != nil:
		// Never sent: everything back, and the provider never saw it.
		q.undo(nt, c.taken, c.cost)
		for d := range NumDims {
			q.m.released[d].Add(c.cost[d])
		}
	case !u.Sent || c.refused:
		q.undo(nt, c.taken, c.cost)
	default:
		for d := range NumDims {
			if c.taken&(1<<d) == 0 {
				continue
			}
			delta := used[d] - c.cost[d]
			if q.m != nil && delta < 0 {
				continue // the provider keeps what it took
			}
			q.b[d].Adjust(nt, delta)
		}
	}
	*c = claim{}
}
