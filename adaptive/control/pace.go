package control

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive/internal/bucket"
)

// dispatchPace spaces dispatches in time when the provider refuses for a
// request rate that it does not report. A concurrency limit cannot hold a
// request rate: a request goes out when a stream ends, at random, and
// random dispatches into a provider's short bucket are refused even below
// its rate. Spaced evenly at the rate the provider accepts, they are
// not.
//
// The pace is learned from refusals, as the loss part's limit is:
//
//   - a rate-like refusal (lossPart.rateLike: the provider accepted
//     requests sent with more in flight than one it refused) of a request
//     sent with no more in flight than an accepted one over the last
//     paceWindow cool-downs sets the pace to the rate at which the
//     provider accepted requests over that time (their first tokens and
//     answers), or, already pacing, to the lower of the two; at most once
//     per cool-down. A refusal of a request sent with more in flight than
//     any accepted one is the top of the concurrency the provider serves,
//     which the loss part answers: pacing it would hold back a capacity
//     that grew (a provider without a queue whose capacity doubled would
//     stay paced at the rate of the old one);
//   - while the pace binds (a dispatch waited for its slot), it rises by
//     paceProbe every cool-down without a cut, to find a rate that grew;
//   - after boundMemory cool-downs without a rate-like refusal, at the
//     end of a cool-down in which it did not bind, it is turned off.
//
// The slots are the rate layer's token bucket (adaptive/internal/bucket)
// with a capacity
// of one, so taking a slot is lock-free: one CAS on the time of the next
// free slot (a GCRA with a burst of one). Learning runs under the
// controller's mutex.
type dispatchPace struct {
	slots  bucket.Bucket // one token per slot; off while not pacing
	clk    bucket.Clock  // the slots' time base, and the bins'
	waited atomic.Bool   // a dispatch waited since the last probe

	// Under the controller's mutex.
	cooldown time.Duration
	rate     float64 // requests per second; 0 while not pacing
	// Accepted requests (count, and the most in flight at the dispatch of
	// one) by time of acceptance, in paceBins bins over paceWindow
	// cool-downs; binAt is the index of the newest bin.
	bins     [paceBins]int32
	top      [paceBins]int32
	binAt    int64
	counted  time.Time // first acceptance counted
	cutAt    time.Time
	probedAt time.Time
	refused  time.Time
}

const (
	paceBins = 32
	// paceWindow is how many cool-downs of accepted requests the pace is
	// learned from: 16 s by default, about 50 requests at 3 a second.
	paceWindow = 8
	// paceProbe is the pace's rise per cool-down while it binds.
	paceProbe = 1.05
)

func (p *dispatchPace) init(epoch time.Time, cooldown time.Duration) {
	p.clk, p.cooldown = bucket.Clock{Epoch: epoch}, max(cooldown, time.Millisecond)
}

func (p *dispatchPace) binWidth() time.Duration {
	return p.cooldown * paceWindow / paceBins
}

// wait takes the next dispatch slot at now, if it comes within at most
// within, and returns how long until it (0 when not pacing or the slot is
// now). A slot further away is not taken: ok is false, and wait says
// when the next one would be.
func (p *dispatchPace) wait(now time.Time, within time.Duration) (wait time.Duration, ok bool) {
	if !p.slots.On() {
		return 0, true // not pacing: one atomic load, no time arithmetic
	}
	w, ok, _, on := p.slots.Reserve(p.clk.Ticks(now), 1, bucket.TicksOf(within))
	if !on {
		return 0, true
	}
	if ok && w > 0 && !p.waited.Load() {
		p.waited.Store(true)
	}
	return bucket.DurationOf(w), ok
}

// requestsPerSecond reports the pace in requests per second (0: not pacing).
func (p *dispatchPace) requestsPerSecond() float64 { return p.rate }

// accepted counts one request the provider accepted (its first token or
// its answer) at now, sent with inflight requests in flight.
func (p *dispatchPace) accepted(now time.Time, inflight int) {
	i := p.bin(now)
	p.bins[i%paceBins]++
	p.top[i%paceBins] = max(p.top[i%paceBins], int32(min(inflight, 1<<30)))
	if p.counted.IsZero() {
		p.counted = now
	}
}

// bin advances the ring to now, clearing the bins it passes, and returns
// now's bin index.
func (p *dispatchPace) bin(now time.Time) int64 {
	i := int64(now.Sub(p.clk.Epoch) / p.binWidth())
	if i > p.binAt {
		for j := p.binAt + 1; j <= i && j <= p.binAt+paceBins; j++ {
			p.bins[j%paceBins], p.top[j%paceBins] = 0, 0
		}
		p.binAt = i
	}
	return max(i, p.binAt)
}

// refusal reports a rate-like refusal at now of a request sent with
// inflight requests in flight.
func (p *dispatchPace) refusal(now time.Time, inflight int) {
	p.bin(now)
	var n, top int64
	for i := range p.bins {
		n += int64(p.bins[i])
		top = max(top, int64(p.top[i]))
	}
	if int64(inflight) > top {
		return // the top of the concurrency served: the loss part's
	}
	p.refused = now
	if !p.cutAt.IsZero() && now.Sub(p.cutAt) < p.cooldown {
		return
	}
	span := min(paceWindow*p.cooldown, now.Sub(p.counted))
	est := float64(n) / max(span, p.cooldown).Seconds()
	if p.rate == 0 || est < p.rate {
		p.rate = est
	}
	p.cutAt, p.probedAt = now, now
	p.publish(now)
}

// tick probes and retires the pace at now.
func (p *dispatchPace) tick(now time.Time) {
	if p.rate == 0 || now.Sub(p.probedAt) < p.cooldown {
		return
	}
	p.probedAt = now
	switch {
	case p.waited.Swap(false):
		p.rate *= paceProbe
	case now.Sub(p.refused) > boundMemory*p.cooldown:
		p.rate = 0
	default:
		return
	}
	p.publish(now)
}

// publish sets the slots to the pace at now: one per 1/rate from the next
// free one on (the slots already taken stay where they were given: a
// bucket retime, not a resize, which would move them by the ratio of the
// paces and draw more refusals), or none while not pacing.
func (p *dispatchPace) publish(now time.Time) {
	if p.rate <= 0 {
		p.slots.Stop()
		return
	}
	p.slots.Retime(p.clk.Ticks(now), 1, max(time.Duration(float64(time.Second)/p.rate), time.Nanosecond))
}
