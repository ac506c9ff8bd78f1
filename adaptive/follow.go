package adaptive

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/feedback"
)

// mirror is the state a mirror quota keeps to follow the provider.
type mirror struct {
	// Accounting, by dimension, in the quota's units (see scale):
	// everything reserved, everything given back before being sent,
	// everything sent. With the sent count at a request's dispatch they
	// say how much of what Sluice has taken the provider had not yet seen
	// when it answered that request (see learn).
	reserved, released, sent [NumDims]atomic.Int64
	// refused counts what was sent and refused by the provider (429): it
	// never counted it, so scale measurements leave it out.
	refused [NumDims]atomic.Int64
	// fresh is the request count at the dispatch of the request whose
	// headers were applied last: older news is not applied.
	fresh atomic.Int64
	// scale is, by dimension, the provider's count of a request per unit
	// of Sluice's estimate (float64 bits; 0 means 1): Sluice estimates a
	// prompt from its size, the provider counts tokens. Learned from the
	// headers (see learnScale).
	scale [NumDims]atomic.Uint64

	mu  sync.Mutex // ref
	ref [NumDims]learnRef
}

// learnRef is the last header a dimension's scale was measured from.
type learnRef struct {
	valid     bool
	mark      int64 // sent count at that request's dispatch
	refused   int64 // refused count when it was taken
	remaining int64 // the provider's count then
	at        time.Time
}

func newMirror() *mirror { return &mirror{} }

// scaled converts a cost in Sluice's estimates to the provider's units.
// Requests are counted exactly and never scaled.
func (m *mirror) scaled(c costs) costs {
	for d := DimTokens; d < NumDims; d++ {
		if bits := m.scale[d].Load(); bits != 0 && c[d] > 0 {
			c[d] = min(int64(math.Ceil(float64(c[d])*math.Float64frombits(bits))), maxCost)
		}
	}
	return c
}

// Scale reports the factor Sluice's estimates of dimension d are
// multiplied by on this mirror (1 when nothing was learned or for an own
// quota).
func (q *Quota) Scale(d Dim) float64 {
	if q.m == nil {
		return 1
	}
	if bits := q.m.scale[d].Load(); bits != 0 {
		return math.Float64frombits(bits)
	}
	return 1
}

// learn makes a mirror quota follow what the provider said about the
// account's quota in the headers of the response to the request holding
// c (sent, not yet settled). refused says the provider refused the request
// for its rate limit (429): it counted nothing for it, so c is given back
// in full when it settles. It reports whether anything was applied.
//
// For each dimension the provider reported:
//   - a limit sets the bucket's capacity, and its window is estimated
//     from the reset time (see learnWindow);
//   - a remaining count sets the bucket's level. The count is as of when
//     the provider admitted this request, so the bucket's level now is
//     that count, plus what refilled since this request was sent, minus
//     what Sluice has taken that the provider had not seen then: the
//     requests sent after this one, and the ones reserved but not sent
//     yet (waiting for their turn). Without that correction, each of many
//     concurrent responses would hand back quota that is already spoken
//     for, and Sluice would overshoot by its own concurrency.
//
// News older than what was already applied (a response to a request sent
// before the one whose headers were applied last) is ignored: responses
// arrive out of order, and the freshest count wins.
//
// The correction reads the accounting after the bucket's state, and a
// reservation counts itself before touching the buckets, so a
// reservation racing with learn is at worst counted twice (the bucket
// looks emptier than it is, until the next response), never missed.
//
// Anthropic reports input and output tokens separately, and under
// "tokens" the most restrictive of them, which is not a bucket of its
// own: when input or output tokens are reported, tokens are ignored.
func (q *Quota) learn(now time.Time, c *claim, refused bool, rl *feedback.RateLimits) bool {
	m := q.m
	if m == nil || c.state != claimSent || c.q != q {
		return false
	}
	if refused && !c.refused {
		c.refused = true
		for d := range NumDims {
			m.refused[d].Add(c.cost[d])
		}
	}
	if !rl.Any() {
		return false
	}
	mark := c.mark[DimRequests]
	for {
		f := m.fresh.Load()
		if mark <= f {
			return false
		}
		if m.fresh.CompareAndSwap(f, mark) {
			break
		}
	}
	q.apply(now, c, !refused, rl) // a refused request says nothing of how it is counted
	return true
}

// learnFirst applies the headers of a response to a request that holds no
// claim on q because q was off when it was sent: nothing configured,
// nothing learned. It turns q on (later requests claim on it, and their
// responses refine it) and reports whether it did; once q is on, responses
// to unclaimed requests are ignored. The request is taken as sent at
// sentAt, with nothing sent since that the provider had not seen (while q
// is off, nothing is counted).
func (q *Quota) learnFirst(now, sentAt time.Time, rl *feedback.RateLimits) bool {
	m := q.m
	if m == nil || q.on() || !rl.Any() {
		return false
	}
	c := claim{q: q, state: claimSent, sentAt: sentAt}
	for d := range NumDims {
		c.mark[d] = m.sent[d].Load()
	}
	q.apply(now, &c, false, rl)
	return true
}

// holdUntil makes q's requests refuse until retryAfter from now has
// passed: the provider refused the account and said when to come back.
// A wait longer than the quota's window is not believed (the quota is
// whole again after a window); only a quota that counts requests holds
// (one that counts only tokens learns when it refills from the headers).
func (q *Quota) holdUntil(now time.Time, retryAfter time.Duration) {
	b := &q.b[DimRequests]
	if _, w := b.Params(); w > 0 {
		b.HoldUntil(q.clk.Ticks(now.Add(min(retryAfter, w))))
	}
}

// apply sets q's dimensions from what the provider reported in the
// response to the request holding c (see learn).
func (q *Quota) apply(now time.Time, c *claim, scale bool, rl *feedback.RateLimits) {
	nt := q.clk.Ticks(now)
	since := max(now.Sub(c.sentAt), 0)
	q.learnDim(nt, since, c, DimRequests, rl.Requests, scale)
	if rl.InputTokens.Has == 0 && rl.OutputTokens.Has == 0 {
		q.learnDim(nt, since, c, DimTokens, rl.Tokens, scale)
	}
	q.learnDim(nt, since, c, DimInput, rl.InputTokens, scale)
	q.learnDim(nt, since, c, DimOutput, rl.OutputTokens, scale)
}

func (q *Quota) learnDim(nt int64, since time.Duration, c *claim, d Dim, r feedback.RateLimit, scale bool) {
	b := &q.b[d]
	capacity, window := b.Params()
	if window == 0 {
		window = rateWindow
	}
	switch {
	case r.Has&feedback.HasLimit != 0 && r.Limit > 0:
		w := learnWindow(r, window)
		if r.Limit != capacity || w != window {
			b.Resize(nt, r.Limit, w)
			capacity, window = r.Limit, w
		}
	case r.Has&feedback.HasRemaining != 0 && r.Remaining > capacity:
		// No limit reported (some gateways send remaining only): the
		// largest remaining seen is the best lower bound of the limit.
		b.Resize(nt, r.Remaining, window)
		capacity = r.Remaining
	}
	if capacity == 0 || r.Has&feedback.HasRemaining == 0 {
		return
	}
	if scale && d != DimRequests {
		q.m.learnScale(d, c, r.Remaining, capacity, window)
	}
	refill := int64(math.Min(float64(since)/float64(window)*float64(capacity), float64(capacity)))
	margin := (capacity*learnMarginPercent + 99) / 100
	b.SetLevel(nt, min(r.Remaining+refill, capacity)-margin, func(level int64) int64 {
		// Released first: a release seen implies its reservation is
		// seen too, so the difference never undercounts.
		rel := q.m.released[d].Load()
		unseen := q.m.reserved[d].Load() - rel - c.mark[d]
		return level - max(unseen, 0)
	})
}

// learnMarginPercent of a learned capacity is kept in hand: Sluice's
// estimate of a prompt is not the provider's count (the estimates of the
// requests the provider had not seen yet are off by the sum of their
// errors), and other consumers of the same account spend quota Sluice
// does not see until the next response. Refill, not capacity, sets the
// sustained rate, so the margin costs a little burst after an idle
// period, not throughput (follow_sim_test.go measures both).
const learnMarginPercent = 5

// Windows a learned limit snaps to: providers count per second, minute,
// hour or day.
var learnedWindows = [...]time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}

// learnWindow estimates the window of a reported limit from its reset
// time: a bucket of limit tokens that refills continuously and lacks
// limit-remaining tokens is whole again after reset = window x
// (limit-remaining)/limit. Only a deficit of at least a twentieth of the
// limit, with a reset of at least half a second, is trusted (reset times
// are rounded to milliseconds or whole seconds); the estimate snaps to the
// nearest (in ratio) of a second, a minute, an hour and a day. Otherwise
// the current window stands.
func learnWindow(r feedback.RateLimit, current time.Duration) time.Duration {
	const all = feedback.HasLimit | feedback.HasRemaining | feedback.HasReset
	if r.Has&all != all || r.Limit <= 0 || r.Remaining >= r.Limit {
		return current
	}
	deficit := r.Limit - r.Remaining
	if deficit*20 < r.Limit || r.Reset < 500*time.Millisecond {
		return current
	}
	est := float64(r.Reset) * float64(r.Limit) / float64(deficit)
	best, bestDist := current, math.Inf(1)
	for _, w := range learnedWindows {
		if dist := math.Abs(math.Log(est / float64(w))); dist < bestDist {
			best, bestDist = w, dist
		}
	}
	return best
}

// Bounds of a learned scale, and how much of a new measurement it takes
// (in log terms, so that over- and under-estimates weigh the same).
const (
	minScale   = 0.25
	maxScale   = 4
	scaleAlpha = 0.2
)

// learnScale measures how the provider counts dimension d against
// Sluice's estimates: between two of its responses, the provider's count
// fell by what it counted for the requests sent in between, less what
// refilled; Sluice reserved their estimates. The ratio moves the scale.
// A measurement is taken only over at least a twentieth of the capacity
// (fewer tokens are noise) and while the provider's bucket cannot have
// been full in between (refill would be overcounted). Output tokens never
// scale below 1: providers check a request's max_tokens in full when they
// admit it, even when they give the unused part back later.
func (m *mirror) learnScale(d Dim, c *claim, remaining, capacity int64, window time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ref := &m.ref[d]
	now := learnRef{valid: true, mark: c.mark[d], refused: m.refused[d].Load(), remaining: remaining, at: c.sentAt}
	if !ref.valid || c.mark[d] <= ref.mark || c.sentAt.Before(ref.at) {
		*ref = now
		return
	}
	ours := c.mark[d] - ref.mark - (now.refused - ref.refused)
	if ours*4 < capacity {
		return // keep measuring from ref
	}
	refill := float64(c.sentAt.Sub(ref.at)) / float64(window) * float64(capacity)
	if float64(ref.remaining)+refill <= 0.95*float64(capacity) {
		theirs := float64(ref.remaining) + refill - float64(remaining)
		old := 1.0
		if bits := m.scale[d].Load(); bits != 0 {
			old = math.Float64frombits(bits)
		}
		// ours is in scaled units: the ratio corrects the current scale.
		ratio := min(max(theirs/float64(ours), 0.5), 2)
		next := min(max(old*math.Pow(ratio, scaleAlpha), minScale), maxScale)
		if d == DimOutput {
			next = max(next, 1)
		}
		m.scale[d].Store(math.Float64bits(next))
	}
	*ref = now
}
