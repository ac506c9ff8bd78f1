package adaptive

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/feedback"
)

// learn makes a mirror quota follow what the provider said about the
// account's quota in the headers of the response to the request holding
// c (sent, not yet settled). It reports whether anything was applied.
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
func (q *Quota) learn(now time.Time, c *claim, rl *feedback.RateLimits) bool {
	if !q.mirror || c.state != claimSent || c.q != q || !rl.Any() {
		return false
	}
	mark := c.mark[DimRequests]
	for {
		f := q.fresh.Load()
		if mark <= f {
			return false
		}
		if q.fresh.CompareAndSwap(f, mark) {
			break
		}
	}
	nt := q.clk.ticks(now)
	since := max(now.Sub(c.sentAt), 0)
	q.learnDim(nt, since, c, DimRequests, rl.Requests)
	if rl.InputTokens.Has == 0 && rl.OutputTokens.Has == 0 {
		q.learnDim(nt, since, c, DimTokens, rl.Tokens)
	}
	q.learnDim(nt, since, c, DimInput, rl.InputTokens)
	q.learnDim(nt, since, c, DimOutput, rl.OutputTokens)
	return true
}

func (q *Quota) learnDim(nt int64, since time.Duration, c *claim, d Dim, r feedback.RateLimit) {
	b := &q.b[d]
	capacity, window := b.params()
	if window == 0 {
		window = rateWindow
	}
	switch {
	case r.Has&feedback.HasLimit != 0 && r.Limit > 0:
		w := learnWindow(r, window)
		if r.Limit != capacity || w != window {
			b.resize(nt, r.Limit, w)
			capacity, window = r.Limit, w
		}
	case r.Has&feedback.HasRemaining != 0 && r.Remaining > capacity:
		// No limit reported (some gateways send remaining only): the
		// largest remaining seen is the best lower bound of the limit.
		b.resize(nt, r.Remaining, window)
		capacity = r.Remaining
	}
	if capacity == 0 || r.Has&feedback.HasRemaining == 0 {
		return
	}
	refill := int64(math.Min(float64(since)/float64(window)*float64(capacity), float64(capacity)))
	b.setLevel(nt, min(r.Remaining+refill, capacity), func(level int64) int64 {
		// Released first: a release seen implies its reservation is
		// seen too, so the difference never undercounts.
		rel := q.released[d].Load()
		unseen := q.reserved[d].Load() - rel - c.mark[d]
		return level - max(unseen, 0)
	})
}

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
