package sim

import (
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"time"
)

var (
	errAborted    = errors.New("sim: server closed")
	errClientGone = errors.New("sim: client went away")
	errReset      = errors.New("sim: injected reset-mid-stream")
	errHangDone   = errors.New("sim: hang ended")
)

// pollInterval is how often a silent request (queued, in prefill, hanging)
// checks whether its client is still connected.
const pollInterval = 25 * time.Millisecond

// request is one admitted model request: its plan (drawn at arrival) and
// the waits that carry it out. Owned by one goroutine at a time (the handler,
// then the response writer for streams).
type request struct {
	s   *Server
	cfg *Config // snapshot at arrival
	t   ticket
	n   uint64    // arrival number
	at  time.Time // arrival, real time

	dialect      Dialect
	stream       bool
	prompt       int
	output       int  // tokens to produce
	length       bool // output was cut by max_tokens
	ttftJitter   float64
	ttft, itl    time.Duration // per-request overrides (model time); < 0 means none
	fault        FaultKind
	faultAfter   int
	silent       bool
	rng          *rand.Rand
	conn         net.Conn // polled for disconnects; nil if it cannot be peeked
	timer        *time.Timer
	enc          *encoder
	includeUsage bool
}

// lognormal returns exp(sigma*N(0,1)), median 1; sigma 0 gives 1 (but still
// consumes a draw, so the order of draws does not depend on settings).
func lognormal(rng *rand.Rand, sigma float64) float64 {
	return math.Exp(sigma * rng.NormFloat64())
}

// drawOutput draws an output length: lognormal with the configured mean,
// in [1, MaxOutputTokens].
func drawOutput(rng *rand.Rand, c *Config) int {
	mu := math.Log(float64(c.MeanOutputTokens)) - c.OutputSigma*c.OutputSigma/2
	n := int(math.Round(math.Exp(mu + c.OutputSigma*rng.NormFloat64())))
	return min(max(n, 1), c.MaxOutputTokens)
}

// waitSlot blocks until the request holds a slot, the client goes away or
// the server closes.
func (r *request) waitSlot() error {
	if r.t.ready == nil {
		return nil // admitted straight to running
	}
	var poll <-chan time.Time
	if r.conn != nil {
		tk := time.NewTicker(pollInterval)
		defer tk.Stop()
		poll = tk.C
	}
	for {
		select {
		case <-r.t.ready:
			return nil
		case <-r.s.abort:
			return errAborted
		case <-poll:
			if connGone(r.conn) {
				return errClientGone
			}
		}
	}
}

// sleepUntil waits for the real time deadline, checking the client every
// pollInterval while the wait is long. It returns errAborted if the server
// closes and errClientGone if the client leaves.
func (r *request) sleepUntil(deadline time.Time) error { return r.sleep(deadline, true) }

// sleepBetweenTokens is sleepUntil without checking the client: a stream
// notices a departed client at its next write (see the package doc), and
// not peeking keeps thousands of long-lived streams from costing a syscall
// each every pollInterval.
func (r *request) sleepBetweenTokens(deadline time.Time) error { return r.sleep(deadline, false) }

func (r *request) sleep(deadline time.Time, poll bool) error {
	for {
		d := time.Until(deadline)
		if d <= 0 {
			return nil
		}
		polling := poll && r.conn != nil && d > pollInterval
		if polling {
			d = pollInterval
		}
		if r.timer == nil {
			r.timer = time.NewTimer(d)
		} else {
			r.timer.Reset(d)
		}
		select {
		case <-r.timer.C:
		case <-r.s.abort:
			r.timer.Stop()
			return errAborted
		}
		if polling && connGone(r.conn) {
			return errClientGone
		}
	}
}

func (r *request) stopTimer() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

// firstTokenDelay is the real time from starting to run until the first
// token, with running/C read now.
func (r *request) firstTokenDelay() time.Duration {
	c := r.cfg
	if r.ttft >= 0 {
		return c.scale(r.ttft)
	}
	base := float64(c.BaseTTFT)
	if c.PrefillRate > 0 {
		base += float64(r.prompt) / c.PrefillRate * float64(time.Second)
	}
	f := r.ttftJitter
	if c.Shape.sharing() {
		f *= r.s.slowdown(c)
	} else {
		f *= 1 + c.SoftTTFT*r.s.load()
	}
	return c.scale(time.Duration(base * f))
}

// tokenDelay is the real time until the next token, with running/C read now.
func (r *request) tokenDelay() time.Duration {
	c := r.cfg
	base := c.ITL
	if r.itl >= 0 {
		base = r.itl
	}
	f := 1 + c.ITLLoad*r.s.load()
	if c.Shape.sharing() {
		f = r.s.slowdown(c)
	}
	if c.ITLJitter > 0 {
		f *= lognormal(r.rng, c.ITLJitter)
	}
	return c.scale(time.Duration(float64(base) * f))
}

// outcomeOf maps a wait or stream error to how the request ended.
func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return outCompleted
	case errors.Is(err, errAborted):
		return outAborted
	case errors.Is(err, errReset), errors.Is(err, errHangDone):
		return outError
	default:
		return outDisconnect
	}
}

// generate carries out a non-stream request: waits for a slot, prefill and
// every token, then frees the slot. It returns nil when the body is due, or
// the error that ended the request early.
func (r *request) generate() error {
	defer r.stopTimer()
	if err := r.waitSlot(); err != nil {
		return err
	}
	at := time.Now().Add(r.firstTokenDelay())
	if err := r.sleepUntil(at); err != nil {
		return err
	}
	if r.fault == FaultReset {
		r.s.count(func(st *Stats) { st.Resets++ })
		return errReset
	}
	produced := 0
	if r.output > 0 {
		produced = 1
	}
	// Later tokens: sleep in batches, re-reading the load per token.
	const batch = 16
	for produced < r.output {
		for i := 0; i < batch && produced < r.output; i++ {
			at = at.Add(r.tokenDelay())
			produced++
		}
		if err := r.sleepUntil(at); err != nil {
			return err
		}
	}
	r.s.release(&r.t)
	return nil
}
