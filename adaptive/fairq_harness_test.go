package adaptive

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// stateController is a test Controller whose limit and reported state the
// test sets (the state drives the class shares).
type stateController struct {
	lim      atomic.Int64
	median   atomic.Int64 // TTFTMedian, ns
	baseline atomic.Int64 // TTFTBaseline, ns
}

func (c *stateController) Observe(control.Sample) int { return int(c.lim.Load()) }
func (c *stateController) Limit() int                 { return int(c.lim.Load()) }
func (c *stateController) State() control.State {
	return control.State{
		Limit:        c.Limit(),
		Binding:      "delay",
		TTFTMedian:   time.Duration(c.median.Load()),
		TTFTBaseline: time.Duration(c.baseline.Load()),
	}
}

// queueSettings returns three classes: interactive (share 1), standard
// (share 1) and batch (0.5, shrinking to 0.25 when saturated).
func queueSettings(maxWaiting int, maxWait time.Duration) settings.Queue {
	q := settings.DefaultQueue()
	q.MaxWaiting, q.MaxWait = maxWaiting, maxWait
	q.Classes = []settings.Class{
		{Name: "interactive", MaxShare: 1, SaturatedShare: 1},
		{Name: "standard", MaxShare: 1, SaturatedShare: 1},
		{Name: "batch", MaxShare: 0.5, SaturatedShare: 0.25},
	}
	return q
}

// Class ids of queueSettings.
const (
	clsInteractive uint8 = 1
	clsStandard    uint8 = 2
	clsBatch       uint8 = 3
)

// harness drives a Limiter in virtual time through its internal steps
// (enqueue, leave, resolve), without goroutines or real timers, so that
// every interleaving is chosen by the test.
type harness struct {
	t    testing.TB
	l    *Limiter
	clk  *vtime.Clock
	ctrl *stateController
	reqs []*hreq
	open []*hreq // requests queued at the last poll or since
	step int     // advanced by the test; grants record it
}

// Request states in the harness.
const (
	hQueued = iota
	hHeld
	hDone     // held, then finished
	hRefused  // refused at once or while waiting
	hCanceled // left the queue with its client
)

type hreq struct {
	id       int
	f        Flow
	p        Permit
	w        *waiter // while queued
	enq      time.Time
	deadline time.Time
	state    int
	gstep    int // harness step of the grant
	err      error
	ends     int // times the request reached a final state or was granted
}

func newHarness(t testing.TB, limit int, q settings.Queue) *harness {
	c := &stateController{}
	c.lim.Store(int64(limit))
	set := settings.DefaultLimit()
	set.Algorithm, set.Ceiling, set.Min, set.Initial = settings.AlgorithmFixed, 1000, 1, 1
	clk := vtime.NewClock()
	return &harness{t: t, l: newLimiter(LimiterSettings{Limit: set, Queue: q}, c, clk), clk: clk, ctrl: c}
}

func (h *harness) now() time.Time { return h.clk.Now() }

// arrive sends a request of f: granted at once, queued or refused.
func (h *harness) arrive(f Flow) *hreq {
	r := &hreq{id: len(h.reqs), f: f, enq: h.now()}
	h.reqs = append(h.reqs, r)
	if h.l.TryAcquire(r.enq, f, &r.p) {
		r.state, r.gstep = hHeld, h.step
		r.ends++
		return r
	}
	w, wait, err := h.l.enqueue(r.enq, f, &r.p)
	switch {
	case err != nil:
		r.state, r.err = hRefused, err
		r.ends++
	case wait == 0:
		h.settle(r, w, nil)
	default:
		r.w, r.deadline, r.state = w, r.enq.Add(wait), hQueued
		h.open = append(h.open, r)
	}
	return r
}

// settle turns a resolved (or left) waiter into r's state.
func (h *harness) settle(r *hreq, w *waiter, err error) {
	err = h.l.resolve(w, r.enq, err, &r.p)
	r.w = nil
	r.ends++
	switch {
	case err == nil:
		r.state, r.gstep = hHeld, h.step
	case err == ErrCanceled:
		r.state, r.err = hCanceled, err
	default:
		r.state, r.err = hRefused, err
	}
}

// poll collects every waiter that was granted or displaced.
func (h *harness) poll() []*hreq {
	var got []*hreq
	for _, r := range h.open {
		if r.state != hQueued {
			continue
		}
		select {
		case <-r.w.ch:
			h.settle(r, r.w, nil)
			got = append(got, r)
		default:
		}
	}
	h.compact()
	return got
}

// stepSim is one step of a queue simulation at now: the clock moves by
// tick and every request whose end (in ends) has come finishes. It
// reports whether any permit was released.
func (h *harness) stepSim(now, tick time.Duration, ends map[*hreq]time.Duration) bool {
	h.step++
	h.clk.Advance(tick)
	released := false
	for r, end := range ends {
		if end <= now {
			delete(ends, r)
			h.finish(r, 0)
			released = true
		}
	}
	return released
}

// grantWaiting hands the permits a release freed to the waiters (only a
// release does, in a one-thread simulation) and calls granted for each
// request that got one.
func (h *harness) grantWaiting(now time.Duration, granted func(r *hreq, now time.Duration)) {
	for _, r := range h.poll() {
		if r.state == hHeld {
			granted(r, now)
		}
	}
}

// compact drops the requests that left the queue from open.
func (h *harness) compact() {
	n := 0
	for _, r := range h.open {
		if r.state == hQueued {
			h.open[n] = r
			n++
		}
	}
	clear(h.open[n:])
	h.open = h.open[:n]
}

// leave ends r's wait with err (ErrQueueTimeout or ErrCanceled), unless it
// was resolved first.
func (h *harness) leave(r *hreq, err error) {
	if h.l.leave(r.w, err) {
		h.settle(r, r.w, err)
		return
	}
	<-r.w.ch
	h.settle(r, r.w, nil)
}

// expire times out every waiter whose deadline passed.
func (h *harness) expire() {
	for _, r := range h.open {
		if r.state == hQueued && !h.now().Before(r.deadline) {
			h.leave(r, ErrQueueTimeout)
		}
	}
	h.compact()
}

// finish ends a held request with its actual token usage (0: the estimate).
func (h *harness) finish(r *hreq, tokens int) {
	if !r.p.Finish(h.now(), Outcome{Tokens: tokens}) {
		h.t.Fatalf("request %d: Finish on a permit that is not held", r.id)
	}
	r.state = hDone
}

// setLimit moves the controller's limit and applies it, as an Observe does.
func (h *harness) setLimit(n int) {
	h.ctrl.lim.Store(int64(n))
	h.l.setLimit(h.l.controllerLimit())
}

// setSaturation makes the controller report a TTFT median of ratio times
// its baseline and refreshes the shares, as an Observe does.
func (h *harness) setSaturation(ratio float64) {
	h.ctrl.baseline.Store(int64(time.Second))
	h.ctrl.median.Store(int64(ratio * float64(time.Second)))
	if h.l.refreshShares(h.now(), true) && h.l.waiting.Load() > 0 {
		h.l.drain(nil)
	}
}

func (h *harness) held() []*hreq {
	var out []*hreq
	for _, r := range h.reqs {
		if r.state == hHeld {
			out = append(out, r)
		}
	}
	return out
}

func (h *harness) queued() []*hreq {
	var out []*hreq
	for _, r := range h.open {
		if r.state == hQueued {
			out = append(out, r)
		}
	}
	return out
}

// wantState fails unless r is in state st.
func (h *harness) wantState(r *hreq, st int, what string) {
	h.t.Helper()
	if r.state != st {
		h.t.Fatalf("%s: request %d state %d (err %v), want %d", what, r.id, r.state, r.err, st)
	}
}
