package control

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// New returns the Controller for s.Algorithm, or an error listing every
// problem with s (it rejects, never repairs, a bad value). clk must not be
// nil; every timing decision reads it, so a virtual clock runs the
// controller in virtual time.
//
// An adaptive controller (gradient2, aimd) also has PaceWait (its dispatch
// pace, pace.go), FreezeGrowth (freeze.go) and LearnedBaseline and
// SeedBaseline (fleet_baseline.go), all safe for concurrent use; the fixed
// controller has none of them.
func New(s settings.Limit, clk Clock) (Controller, error) {
	err := s.Validate()
	if clk == nil {
		err = errors.Join(err, errors.New("adaptive: nil clock"))
	}
	if err != nil {
		return nil, err
	}
	if s.Algorithm == settings.AlgorithmFixed {
		return &fixedController{limit: s.Ceiling}, nil
	}
	return newAdaptiveController(s, clk), nil
}

// fixedController is a plain semaphore of Ceiling: the seed behaviour, for
// comparison and for providers with a contractual concurrency.
type fixedController struct{ limit int }

// Observe ignores s and returns the ceiling.
func (c *fixedController) Observe(Sample) int { return c.limit }

// Limit returns the ceiling.
func (c *fixedController) Limit() int { return c.limit }

// State reports the fixed limit.
func (c *fixedController) State() State {
	return State{Algorithm: settings.AlgorithmFixed, Limit: c.limit, Binding: "fixed"}
}

// maxTTFT bounds a plausible TTFT sample. Anything longer is a broken
// measurement (a clock jump, an unset field) and would dominate the
// long-term average for hundreds of windows.
const maxTTFT = time.Hour

// adaptiveController combines the parts: effective limit =
// clamp(min(delay, loss, rate), Min, Ceiling). settings.AlgorithmAIMD has no delay
// part; the rate part exists only when MinTokenRate > 0.
//
// One mutex serialises Observe and State: Observe runs once per request
// (first token, drop, end of stream), not per event, so the lock is not hot.
// Limit is an atomic load. No part registers a NotifyOnChange listener on a
// library limit: the library calls listeners under its own mutex, and a
// listener that reads the limit back deadlocks.
type adaptiveController struct {
	s     settings.Limit
	clk   Clock
	limit atomic.Int64 // effective limit, published for Limit()

	mu    sync.Mutex
	delay *delayPart // nil for settings.AlgorithmAIMD
	win   delayWindow
	loss  lossPart
	rate  *ratePart // nil when MinTokenRate == 0
	pace  dispatchPace

	eff          int
	binding      string
	frozenUntil  time.Time // Retry-After: no growth before then
	lastDrop     time.Time
	lastDropKind DropKind
	lastRate     float64
	firstTokens  int // valid first tokens since the last window closed
	// answered counts non-streaming answers since answeredFrom, while no
	// stream has had a first token (observeAnswered), and answeredMax is
	// the most permits in use at the dispatch of one of them;
	// lastFirstToken is when the latest first token came, stale or not.
	answered       int
	answeredMax    int
	answeredFrom   time.Time
	lastFirstToken time.Time
	// lastAnswer is when the latest whole answer came: while they come,
	// the requests past their first token (Sample.Decoding) are not all
	// the provider serves.
	lastAnswer time.Time
	// lastMaxInflight is the most requests in flight at a dispatch of the
	// latest closed delay window: with the open window's, the load slow
	// start's growth per first token must keep up with (ackGrow).
	lastMaxInflight int
	stale           uint64
	invalid         uint64
}

func newAdaptiveController(s settings.Limit, clk Clock) *adaptiveController {
	c := &adaptiveController{s: s, clk: clk}
	now := clk.Now()
	if s.Algorithm == settings.AlgorithmGradient2 {
		c.delay = newDelayPart(s)
		// The first window is the reference every later one is compared
		// with: it waits for twice the samples.
		c.win = newDelayWindow(s.Window, 2*s.WindowSamples, now)
		// A cold start dispatches Initial requests at once when they are
		// waiting: the first window may close as soon as they reported.
		c.win.early = max(2*s.WindowSamples, s.Initial)
	}
	c.loss = newLossPart(s)
	c.pace.init(now, s.Cooldown)
	if c.delay != nil {
		// With a delay part, the loss part only answers refusals: until the
		// first one it does not bind (it starts at the ceiling), so growth
		// is the delay part's (slow start) and not +1 per request.
		c.loss.set(s.Ceiling)
	}
	if s.MinTokenRate > 0 {
		c.rate = newRatePart(s)
	}
	c.recompute()
	return c
}

// Limit returns the effective limit, already clamped to [Min, Ceiling].
func (c *adaptiveController) Limit() int { return int(c.limit.Load()) }

// Observe feeds one sample and returns the new effective limit.
//
// Timing decisions (windows, cool-downs, Retry-After) read the controller's
// Clock under the lock, so concurrent callers see one monotonic order;
// s.Now is not used for them. s.Dispatched is compared with the times of
// the delay part's last decrease and the loss part's last cut to drop stale
// samples, so it must come from the same clock.
func (c *adaptiveController) Observe(s Sample) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	frozen := now.Before(c.frozenUntil)
	if !frozen {
		// Held permits come back only after every Retry-After has passed:
		// a freeze means no rise of the limit at all.
		c.loss.restore(now)
	}
	switch s.Kind {
	case FirstToken:
		c.pace.accepted(now, s.InflightAtDispatch)
		// A first token is a success for the loss part whatever its TTFT
		// says: the request was served.
		if !frozen {
			c.loss.served(now, s.Dispatched, s.InflightAtDispatch, true)
		}
		if c.delay != nil {
			c.observeTTFT(now, s, frozen)
		}
	case Answered:
		c.lastAnswer = now
		c.pace.accepted(now, s.InflightAtDispatch)
		if !frozen {
			c.loss.served(now, s.Dispatched, s.InflightAtDispatch, true)
		}
		if c.delay != nil {
			c.observeAnswered(now, s, frozen)
		}
	case Dropped:
		c.lastDrop, c.lastDropKind = now, s.Drop
		if c.delay != nil && s.Drop != DropTimeout {
			c.win.refusal()
		}
		if s.RetryAfter > 0 {
			if until := now.Add(capRetryAfter(s.RetryAfter)); until.After(c.frozenUntil) {
				c.frozenUntil = until
			}
			// Pin the loss part to the current limit so that no other part
			// can raise the effective limit during the freeze either.
			c.loss.pin(c.eff)
		}
		if c.loss.drop(now, s, c.eff) && c.delay != nil {
			c.delay.congestionSignal(float64(c.loss.value()))
		}
		if s.Drop == DropRateLimit && c.loss.rateLike(now) {
			c.pace.refusal(now, s.InflightAtDispatch)
		}
	case TokenRate:
		if math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) || s.Rate < 0 {
			c.invalid++
			break
		}
		c.lastRate = s.Rate
		if c.delay != nil {
			c.win.addRate(s.Rate)
			if c.delay.recallOnRate(now, s.Rate, s.InflightAtDispatch) && !frozen {
				// The capacity came back: the loss part's refusals from
				// the fall no longer bind below it.
				c.loss.lift(now, c.lastDrop, int(math.Ceil(c.delay.known)))
			}
		}
		if !frozen {
			c.loss.served(now, s.Dispatched, s.InflightAtDispatch, false)
		}
		if c.rate != nil && c.rate.observe(now, s.Rate, c.eff, frozen) && c.delay != nil {
			if r, ok := c.rate.value(); ok {
				c.delay.congestionSignal(r)
			}
		}
	}
	c.pace.tick(now)
	return c.recompute()
}

// PaceWait takes the next dispatch slot at now if it comes within at most
// within, and returns how long the dispatch must wait for it (0: send
// now, and always 0 while the controller does not pace); when the slot is
// further away it takes nothing and returns false, with the wait it would
// have had (dispatchPace). Lock-free.
func (c *adaptiveController) PaceWait(now time.Time, within time.Duration) (time.Duration, bool) {
	return c.pace.wait(now, within)
}

// observeTTFT validates, normalises and windows one TTFT sample, and feeds
// the delay part when the window closes.
func (c *adaptiveController) observeTTFT(now time.Time, s Sample, frozen bool) {
	if s.TTFT <= 0 || s.TTFT > maxTTFT {
		c.invalid++
		return
	}
	c.firstTokens++
	c.lastFirstToken = now
	if s.Dispatched.Before(c.delay.lastChange) {
		// Dispatched before the delay part last moved: its TTFT describes
		// the old limit (and, after a decrease, carries queueing that the
		// decrease already answered).
		c.stale++
		return
	}
	if c.delay.windows == 0 && c.win.count == 0 && s.Dispatched.After(c.win.start) {
		// The first window is open from the first request it can see,
		// not from when the controller started: opened at start-up, the
		// first window of traffic that came a second later had already
		// run most of its length, closed on its first 2 x WindowSamples
		// first tokens (the requests dispatched first, at the lowest
		// in-flight counts) and read as a load that did not need the
		// whole limit, which ended the cold start at Initial (with
		// streams of seconds, the limit stayed at 20 for 8 s). Later
		// windows open when the one before closes, with requests in
		// flight.
		c.win.start = s.Dispatched
	}
	ttft := normaliseTTFT(s.TTFT, s.PromptTokens, c.s.PrefillRate)
	c.win.add(ttft, s.InflightAtDispatch, s.Decoding)
	if c.delay.ackGrow(ttft.Seconds(), max(c.win.maxInflight, c.lastMaxInflight), frozen, float64(c.eff)) {
		c.recompute() // the window below judges against the limit in effect
	}
	if c.win.ready(now) {
		c.delay.observeRate(c.firstTokens, now.Sub(c.win.start))
		c.firstTokens = 0
		c.win.need = c.s.WindowSamples
		before := c.delay.est
		st := c.win.close(now)
		c.lastMaxInflight = st.maxInflight
		if !c.lastAnswer.IsZero() && now.Sub(c.lastAnswer) < blindQuiet*c.s.Window {
			// Whole answers in flight are served without a first token:
			// the count of streams past theirs is not what the provider
			// serves, and a provider with room would read as queueing.
			st.decoding, st.maxDecoding = 0, 0
		}
		if c.loss.rateLike(now) {
			st.refused = false // refusals for a request rate say nothing of a queue
		}
		c.delay.onWindow(now, st, frozen, c.loss.refusedAt(now), float64(c.eff))
		// Most first tokens come within twice the median (normalised)
		// TTFT of the window just closed: an early close waits that long,
		// so that the window holds the requests dispatched when it
		// opened, not only their quickest ones.
		c.win.early, c.win.settle = 0, 2*st.median
		switch step := int(c.delay.est - before); {
		case c.delay.round > 0:
			// A round of slow start: its window closes once the round
			// could have doubled the limit, one request per first token.
			c.win.early = max(c.s.WindowSamples, int(c.delay.round))
		case step > 0 && c.delay.slowStart():
			// Slow start doubles once per round of the limit, as TCP's
			// does once per round trip: the window may close once every
			// permit of the new limit could have answered once. Where
			// first tokens come slower than that, the window's length
			// decides, as before; a provider serving hundreds of first
			// tokens per second is not made to wait seconds per doubling.
			c.win.early = max(c.s.WindowSamples, int(c.delay.est))
		case step >= c.s.WindowSamples && !c.delay.slowStart():
			c.win.early = step
		}
	}
}

// observeAnswered lets traffic that the delay part cannot see move it out
// of the way. A non-streaming answer carries no delay sample (the time to
// a whole answer measures its length, not queueing), so a provider served
// only non-streaming requests never closes a delay window, and the delay
// part would hold the limit at Initial however much room the provider
// has. When no stream has had a first token for blindQuiet windows (or
// ever), and 2 x WindowSamples answers came over at least a window, one
// of them dispatched with the limit in use, the delay part doubles
// (growBlind), up to the ceiling. The limit in use is judged over the
// window, as the delay window judges it (its highest in-flight count),
// not answer by answer: a cold start dispatches the whole limit at once,
// and its first answers were sent with 1, 2, ... in flight, so judged
// answer by answer the limit would wait at Initial for the answers to the
// requests sent later. The limit is then the loss part's, as with
// algorithm aimd, which refusals and first-token timeouts cut. Streams,
// even rare ones, keep the decision with the delay part: raised blindly,
// the limit would be where their first window, the reference every later
// one is compared with, is learned, and a rare stream among many answers
// would teach it a congested baseline at the ceiling.
func (c *adaptiveController) observeAnswered(now time.Time, s Sample, frozen bool) {
	if !c.lastFirstToken.IsZero() && now.Sub(c.lastFirstToken) < blindQuiet*c.s.Window {
		c.answered, c.answeredMax = 0, 0
		return
	}
	if c.answered == 0 {
		c.answeredFrom = now
	}
	c.answeredMax = max(c.answeredMax, s.InflightAtDispatch)
	if c.answered++; c.answered < 2*c.s.WindowSamples || now.Sub(c.answeredFrom) < c.s.Window {
		return
	}
	busy := !appLimitedAt(float64(c.answeredMax), float64(c.eff))
	c.answered, c.answeredMax = 0, 0
	if !busy {
		return // the load did not need the whole limit
	}
	c.win.reset(now)
	c.delay.growBlind(now, frozen, float64(c.eff))
}

// blindQuiet is how many windows without a first token make the traffic
// one the delay part cannot see (observeAnswered).
const blindQuiet = 10

// recompute derives the effective limit from the parts and publishes it.
func (c *adaptiveController) recompute() int {
	others := float64(c.loss.value())
	binding := "loss"
	if c.delay != nil {
		if d := float64(c.delay.value()); d <= others {
			others, binding = d, "delay"
		}
	}
	eff := others
	if c.rate != nil {
		// The rate part only lowers: capped at the others, it never holds
		// the limit up (a buffering hop can make streams look fast).
		c.rate.capAt(others)
		if r, ok := c.rate.value(); ok && r < eff {
			eff, binding = r, "rate"
		}
	}
	n := int(eff)
	if n <= c.s.Min {
		if n < c.s.Min {
			binding = "min"
		}
		n = c.s.Min
	}
	if n > c.s.Ceiling {
		n = c.s.Ceiling
	}
	c.eff, c.binding = n, binding
	c.limit.Store(int64(n))
	return n
}

// State returns a snapshot of the parts and which one binds.
func (c *adaptiveController) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := State{
		Algorithm:    c.s.Algorithm,
		Limit:        c.eff,
		Loss:         float64(c.loss.value()),
		Binding:      c.binding,
		LastDrop:     c.lastDrop,
		LastDropKind: c.lastDropKind,
		TokenRate:    c.lastRate,
		StaleSamples: c.stale,
		BadSamples:   c.invalid,
		Pace:         c.pace.requestsPerSecond(),
	}
	if c.clk.Now().Before(c.frozenUntil) {
		st.FrozenUntil = c.frozenUntil
	}
	if c.delay != nil {
		st.Delay = float64(c.delay.value())
		st.TTFTMedian = c.delay.lastMedian
		st.TTFTBaseline = c.delay.baseline()
		st.WindowsApplied = c.delay.windows
		st.DelayResets = c.delay.resets
	}
	if c.rate != nil {
		if r, ok := c.rate.value(); ok {
			st.Rate = r
		}
	}
	return st
}

// normaliseTTFT removes the expected prefill time of the prompt from ttft,
// so that a window's median compares queueing, not prompt sizes. The result
// is floored at minNormalisedTTFT: the library must never see rtt <= 0.
func normaliseTTFT(ttft time.Duration, promptTokens int, prefillRate float64) time.Duration {
	if prefillRate > 0 && promptTokens > 0 {
		prefill := float64(promptTokens) / prefillRate * float64(time.Second)
		if prefill >= float64(ttft) {
			return minNormalisedTTFT
		}
		ttft -= time.Duration(prefill)
	}
	if ttft < minNormalisedTTFT {
		return minNormalisedTTFT
	}
	return ttft
}

// minNormalisedTTFT floors a normalised TTFT: a prompt estimate larger than
// the real one would otherwise produce rtt <= 0, which poisons Gradient2.
const minNormalisedTTFT = time.Millisecond
