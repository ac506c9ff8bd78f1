package sim

import (
	"container/list"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Stats is a consistent snapshot of the server's counters, taken under one
// lock. Every model request (POST to a dialect path) is counted in Requests
// at arrival and, when it ends, in exactly one of Completed, Rejected429,
// Rejected529, Disconnects, Errors or Aborted; until then it is Open. So
// Requests == Open + Completed + Rejected429 + Rejected529 + Disconnects +
// Errors + Aborted at all times.
//
// A stream counts as ended once its last byte has been handed to the
// connection, before the client can see the end of the body; a slot is freed
// when the last token has been produced. So a proxy that releases its permit
// on end of stream never sees the server count fewer in-flight requests than
// the proxy itself does.
type Stats struct {
	// Capacity is C now.
	Capacity int `json:"capacity"`
	// Running requests hold a slot (prefill or decode); Queued wait for one.
	Running int `json:"running"`
	Queued  int `json:"queued"`
	// Open requests have arrived and not ended, whatever their state
	// (running, queued, hanging, being rejected, writing their tail).
	Open int `json:"open"`
	// MaxRunning, MaxInFlight (running+queued) and MaxOpen are high-water
	// marks since New or the last ResetMax.
	MaxRunning  int `json:"max_running"`
	MaxInFlight int `json:"max_in_flight"`
	MaxOpen     int `json:"max_open"`

	Requests    uint64 `json:"requests"`
	Completed   uint64 `json:"completed"`
	Rejected429 uint64 `json:"rejected_429"` // overload (OpenAI), rate limit, quota (OpenAI), x-sim-fail: 429
	Rejected529 uint64 `json:"rejected_529"` // overload (Anthropic), x-sim-fail: 529
	Disconnects uint64 `json:"disconnects"`  // the client went away before the end
	Errors      uint64 `json:"errors"`       // injected faults, bad requests, Anthropic no-credit 400
	Aborted     uint64 `json:"aborted"`      // cut by Close or an expired Shutdown

	// Subsets of the above, for finer assertions.
	Overloaded    uint64 `json:"overloaded"`     // 429/529 for running+queued >= OverloadFactor*C
	RateLimited   uint64 `json:"rate_limited"`   // 429 from RateLimitRPS
	QuotaLimited  uint64 `json:"quota_limited"`  // 429 from Quota (RPM or TPM)
	QuotaRejected uint64 `json:"quota_rejected"` // QuotaExhausted answers
	Resets        uint64 `json:"resets"`         // reset-mid-stream drops
	Hangs         uint64 `json:"hangs"`          // hang faults (ended)

	// OutputTokens counts tokens handed to clients: token events of
	// streams (also of streams cut later) and tokens of non-stream bodies.
	OutputTokens uint64 `json:"output_tokens"`
	// FirstTokens counts streams whose first token event was handed to
	// the client; [Server.TTFT] holds their times to first token.
	FirstTokens uint64 `json:"first_tokens"`
	// QuotaRequests and QuotaTokens count what Quota admitted (requests,
	// and their prompt plus max_tokens).
	QuotaRequests uint64 `json:"quota_requests"`
	QuotaTokens   uint64 `json:"quota_tokens"`
}

// outcome is how a request ended; each maps to one terminal counter.
type outcome int

const (
	outCompleted outcome = iota
	out429
	out529
	outDisconnect
	outError
	outAborted
)

// ticket is a request's place in the provider: nowhere, queued or running.
// Guarded by Server.mu.
type ticket struct {
	state int           // tNone, tQueued, tRunning
	elem  *list.Element // in Server.queue while tQueued
	ready chan struct{} // closed when admitted from the queue
	ended bool          // counted in a terminal counter
}

const (
	tNone = iota
	tQueued
	tRunning
)

// decision is the admission verdict for an arriving request.
type decision int

const (
	admitted decision = iota
	rejectQuota
	rejectRate
	rejectQuotaLimit
	rejectOverload
)

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	st := s.st
	st.Capacity = s.capacity
	st.Running = s.running
	st.Queued = s.queue.Len()
	return st
}

// ResetMax sets MaxRunning, MaxInFlight and MaxOpen to their current values,
// so a scenario can measure one phase.
func (s *Server) ResetMax() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.MaxRunning = s.running
	s.st.MaxInFlight = s.running + s.queue.Len()
	s.st.MaxOpen = s.st.Open
}

// arrive counts a new model request and returns its arrival number.
func (s *Server) arrive() uint64 {
	n := s.seq.Add(1)
	s.mu.Lock()
	s.st.Requests++
	s.st.Open++
	s.st.MaxOpen = max(s.st.MaxOpen, s.st.Open)
	s.mu.Unlock()
	return n
}

// admit decides whether a request of tokens (prompt plus max_tokens)
// enters the provider and, if so, either starts it (tRunning) or queues it
// (tQueued, t.ready to be closed later). A request refused by the Quota
// gets how long until it would fit; quota names the quota it counts in
// (quotaKey).
func (s *Server) admit(t *ticket, cfg *Config, quota string, tokens int) (decision, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refreshLocked()
	if cfg.QuotaExhausted {
		s.st.QuotaRejected++
		return rejectQuota, 0
	}
	if cfg.RateLimitRPS > 0 && !s.takeTokenLocked(cfg) {
		s.st.RateLimited++
		return rejectRate, 0
	}
	if wait, ok := s.takeQuotaLocked(cfg, quota, tokens); !ok {
		s.st.QuotaLimited++
		return rejectQuotaLimit, wait
	}
	if cfg.Shape.sharing() {
		return s.admitSharingLocked(t, cfg), 0
	}
	inflight := s.running + s.queue.Len()
	if cfg.OverloadFactor > 0 && float64(inflight) >= cfg.OverloadFactor*float64(s.capacity) {
		s.st.Overloaded++
		return rejectOverload, 0
	}
	if s.running < s.capacity && s.queue.Len() == 0 {
		t.state = tRunning
		s.setRunningLocked(s.running + 1)
	} else {
		t.state = tQueued
		t.ready = make(chan struct{})
		t.elem = s.queue.PushBack(t)
	}
	s.st.MaxInFlight = max(s.st.MaxInFlight, s.running+s.queue.Len())
	return admitted, 0
}

// admitSharingLocked admits a request of a shape that runs every admitted
// request at once: it starts at once or is refused as overloaded (an
// outage, or the knee's refusal point).
func (s *Server) admitSharingLocked(t *ticket, cfg *Config) decision {
	refuse := s.capacity == 0 ||
		cfg.Shape == ShapeKnee && cfg.OverloadFactor > 0 && float64(s.running) >= cfg.OverloadFactor*float64(s.capacity)
	if refuse {
		s.st.Overloaded++
		return rejectOverload
	}
	t.state = tRunning
	s.setRunningLocked(s.running + 1)
	s.st.MaxInFlight = max(s.st.MaxInFlight, s.running+s.queue.Len())
	return admitted
}

// takeTokenLocked takes one token from the rate-limit bucket if it has one.
func (s *Server) takeTokenLocked(cfg *Config) bool {
	now := cfg.Clock()
	rate := cfg.RateLimitRPS / cfg.TimeScale // tokens per real second
	if el := now.Sub(s.tokensAt).Seconds(); el > 0 {
		s.tokens = min(float64(cfg.RateLimitBurst), s.tokens+el*rate)
	}
	s.tokensAt = now
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

// release frees t's slot or queue place (if any) and admits waiters.
func (s *Server) release(t *ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaveLocked(t)
}

// finish ends a request: frees its slot or queue place and counts it once
// in the terminal counter for o. Later calls do nothing.
func (s *Server) finish(t *ticket, o outcome) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaveLocked(t)
	if t.ended {
		return
	}
	t.ended = true
	s.st.Open--
	switch o {
	case outCompleted:
		s.st.Completed++
	case out429:
		s.st.Rejected429++
	case out529:
		s.st.Rejected529++
	case outDisconnect:
		s.st.Disconnects++
	case outError:
		s.st.Errors++
	case outAborted:
		s.st.Aborted++
	}
}

// TTFT returns the time to first token of every stream since New: real
// time from the request's arrival to the moment its first token event was
// handed to the connection, so the provider's queue and prefill, and
// nothing before the request reached it. Values are microseconds, kept
// from 1 µs to 1 h with 3 significant figures. Non-stream requests are not
// in it (their answer is sent whole). The result is a copy: the
// difference of two copies is an interval's distribution.
func (s *Server) TTFT() *hdrhistogram.Histogram {
	s.mu.Lock()
	defer s.mu.Unlock()
	return hdrhistogram.Import(s.ttft.Export())
}

// firstToken records a stream's time to first token.
func (s *Server) firstToken(d time.Duration) {
	s.mu.Lock()
	_ = s.ttft.RecordValue(min(max(d.Microseconds(), 1), ttftMax)) // in range: cannot fail
	s.st.FirstTokens++
	s.mu.Unlock()
}

// ttftMax is the largest TTFT the histogram keeps, in microseconds.
const ttftMax = int64(time.Hour / time.Microsecond)

func newTTFTHistogram() *hdrhistogram.Histogram { return hdrhistogram.New(1, ttftMax, 3) }

// count adds to informational counters under the lock.
func (s *Server) count(fn func(st *Stats)) {
	s.mu.Lock()
	fn(&s.st)
	s.mu.Unlock()
}

func (s *Server) leaveLocked(t *ticket) {
	switch t.state {
	case tQueued:
		s.queue.Remove(t.elem)
		t.elem = nil
	case tRunning:
		s.setRunningLocked(s.running - 1)
	default:
		return
	}
	t.state = tNone
	s.admitWaitersLocked()
}

// admitWaitersLocked starts queued requests, in arrival order, while there
// is capacity.
func (s *Server) admitWaitersLocked() {
	for s.running < s.capacity && s.queue.Len() > 0 {
		t := s.queue.Remove(s.queue.Front()).(*ticket)
		t.elem = nil
		t.state = tRunning
		s.setRunningLocked(s.running + 1)
		close(t.ready)
	}
}

func (s *Server) setRunningLocked(n int) {
	s.running = n
	s.runningA.Store(int64(n))
	s.st.MaxRunning = max(s.st.MaxRunning, n)
}

// load returns running/C for latency formulas (C taken as at least 1).
func (s *Server) load() float64 {
	return float64(s.runningA.Load()) / float64(max(1, s.capA.Load()))
}

// slowdown is the factor by which the shape stretches time to first token
// and inter-token latency at the load now: 1 when requests queue inside
// the provider (the queue's wait is the slowdown there), running/C beyond
// the knee, 1 + Rise*running/C without one.
func (s *Server) slowdown(cfg *Config) float64 {
	switch cfg.Shape {
	case ShapeKnee:
		return max(1, s.load())
	case ShapeNoKnee:
		return 1 + cfg.Rise*s.load()
	}
	return 1
}

// setScheduleLocked installs steps (sorted, non-empty) starting now.
func (s *Server) setScheduleLocked(steps []Step) {
	s.steps = steps
	s.schedStart = s.cfg.Load().Clock()
	s.capacity = -1 // force refresh to apply and re-arm
	s.stopTimerLocked()
	s.refreshLocked()
}

// refreshLocked applies the schedule step due now, admits waiters if the
// capacity grew and arms the timer for the next step.
func (s *Server) refreshLocked() {
	cfg := s.cfg.Load()
	elapsed := cfg.Clock().Sub(s.schedStart)
	model := time.Duration(float64(elapsed) / cfg.TimeScale)
	i := stepAt(s.steps, model)
	if c := s.steps[i].Capacity; c != s.capacity {
		s.capacity = c
		s.capA.Store(int64(c))
		s.admitWaitersLocked()
	}
	next := i + 1
	if s.closed || next >= len(s.steps) {
		s.stopTimerLocked()
		return
	}
	if s.timer != nil && s.armed == next {
		return // already armed for that step
	}
	s.stopTimerLocked()
	wait := cfg.scale(s.steps[next].At) - elapsed
	s.timerGen++
	gen := s.timerGen
	s.timer = time.AfterFunc(max(wait, 0), func() { s.onStep(gen) })
	s.armed = next
}

func (s *Server) stopTimerLocked() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// onStep runs when the timer armed as generation gen fires.
func (s *Server) onStep(gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed && gen == s.timerGen {
		s.timer = nil // fired; let refresh re-arm (a custom Clock may lag)
		s.refreshLocked()
	}
}
