package adaptive

// Randomized worlds: the admission stack (rate layer, limiter with its
// fair queue and wait estimate, controller) in front of a simulated
// provider, driven by simulated clients, in virtual time and in one
// goroutine, with invariants checked in every world (world_test.go).
//
// Unlike control/sim_engine_test.go, which models Sluice's admission to study the
// controllers, this drives the real Limiter and Rates through the steps
// Acquire is made of (TryAcquire, enqueue, leave, resolve: the limiter's
// resolved hook says when a waiter was granted or displaced), as the
// proxy does for one provider: reserve on the rate layer, wait its wait,
// take a permit within what is left of max_wait, dispatch, feed the
// controller the first token or the refusal, settle. Clients are closed
// loops (think, send, wait for the answer) or open-loop Poisson arrivals;
// they send max_tokens or not, retry as the official SDKs do (up to N
// retries, Retry-After when under a minute, else 0.5 s x 2^n up to 8 s,
// jittered, marked as retries), give up waiting after a time of their own,
// or loop hot (a refused request sent again a millisecond later, as a
// plain loop in user code does). Reloads happen mid-run, accepted
// (another ceiling, max_wait or class shares) or rejected (invalid
// settings, which must change nothing).
//
// The provider runs at most C requests at once (queueing the rest inside
// it, refusing once running+queued reaches overload x C), or, with a
// knee, runs everything and slows in proportion beyond the knee,
// refusing beyond refuseAt. A request's time to first token and decode
// time are drawn when it starts running.

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// worldGroup is one population of clients: one tenant, one class.
type worldGroup struct {
	tenant  uint64
	class   uint8 // Flow.Class (0: default)
	clients int   // closed loop when > 0
	think   time.Duration
	rate    float64 // open loop: arrivals per second
	prompt  vtime.Lognormal
	output  vtime.Lognormal
	// maxTokens: the request sends its drawn output as max_tokens; else
	// it sends none (the output is only known when it ends).
	maxTokens bool
	deadline  time.Duration // its own deadline (Flow.MaxWait); 0: the queue's
	retries   int           // SDK retries after a refusal
	giveUp    time.Duration // the client stops waiting for a permit after this; 0: never
	hot       bool          // a refused request is sent again hotDelay (default 1 ms) later, without end
	hotDelay  time.Duration
}

// worldReload is a config reload at a time: accepted (edit changes the
// settings) or rejected (invalid settings; nothing may change).
type worldReload struct {
	at     time.Duration
	reject bool
	edit   func(*ProviderSettings)
}

// worldSpec is one world.
type worldSpec struct {
	name     string
	seed     uint64
	duration time.Duration
	warm     time.Duration // fairness and calibration are judged after it

	set     ProviderSettings
	reloads []worldReload

	capacity []vtime.Step[int] // queueing provider: capacity over time
	overload float64           // refuse at running+queued >= overload x C; 0: never
	knee     int               // > 0: processor sharing beyond it (capacity unused)
	refuseAt int               // knee shape: refuse at running >= refuseAt; 0: never
	baseTTFT time.Duration
	itl      time.Duration
	jitter   float64

	groups []worldGroup
}

func (w *worldSpec) String() string {
	var tot int
	var rate float64
	for _, g := range w.groups {
		tot += g.clients
		rate += g.rate
	}
	c := w.knee
	if c == 0 && len(w.capacity) > 0 {
		c = w.capacity[0].V
	}
	return fmt.Sprintf("%s seed %d: %s ceiling %d, C %d, %d groups (%d clients, %.1f/s open), max_wait %v, %v",
		w.name, w.seed, w.set.Limit.Algorithm, w.set.Limit.Ceiling, c, len(w.groups), tot, rate, w.set.Queue.MaxWait, w.duration)
}

// Request states in a world.
const (
	wrNew    = iota
	wrRate   // waiting for its rate reservation to come due
	wrQueued // waiting for a permit
	wrHeld   // permit held: at the provider or on its way
	wrDone   // ended: served, refused or canceled
)

type worldReq struct {
	id      int
	g       *worldGroup
	client  int // closed loop; -1 open loop
	attempt int
	prompt  int
	out     int
	flow    Flow
	state   int
	ends    int // times the request ended (must be 1)

	p        Permit
	res      Reservation
	reserved bool
	w        *waiter
	start    time.Duration // the attempt began (rate layer)
	enq      time.Duration // it joined the queue
	grantAt  time.Duration
	deadline time.Duration // absolute, while queued
	est      time.Duration
	grants   float64
	left     uint64 // waiters ahead of it that left the queue without a permit
	gen      int    // bumps when the request leaves a state with a timer
	outcome  string
}

// cfCheck is an early refusal to judge after the run: would the request
// have been served before its deadline, had it waited?
type cfCheck struct {
	r        *worldReq
	at       time.Duration
	deadline time.Duration // absolute
	lvl      int
	ahead    []*worldReq
}

type world struct {
	t    testing.TB
	spec *worldSpec
	clk  *vtime.Loop
	rng  struct{ arrivals, sizes, noise, client *rand.Rand }
	reg  *Registry
	prov *Provider
	lim  *Limiter

	reqs     []*worldReq
	byWaiter map[*waiter]*worldReq
	resolved []*waiter
	held     int

	// provider
	c        int
	running  int
	pq       []*worldReq
	prevSets []ProviderSettings

	// records
	grantTimes [][]time.Duration // per level: every grant (fast path too)
	checks     []cfCheck
	groupStats []worldGroupStats
	ratios     [settings.MaxClasses][]float64 // per class: actual/estimated, long waits after warm
	failures   []string
	maxHeld    int
	maxLimit   int64
	limits     []int64 // the effective limit at every audit (100 ms apart)
	waits      [settings.MaxClasses]classWaits
}

// classWaits counts, per class, the waiters that got their permit and
// those that left without it (timed out or canceled).
type classWaits struct{ served, left int }

type worldGroupStats struct {
	attempts, served, refused, canceled, upstreamRefused int
	waitSum, holdSum                                     time.Duration
	waits, holds                                         int
}

func (w *world) now() time.Duration            { return w.clk.Elapsed() }
func (w *world) at(t time.Duration, fn func()) { w.clk.Schedule(t, fn) }

func (w *world) fail(format string, a ...any) {
	if len(w.failures) < 10 {
		w.failures = append(w.failures, fmt.Sprintf("t=%v: ", w.now())+fmt.Sprintf(format, a...))
	}
}

// runWorld runs spec and returns the world for its invariants.
func runWorld(t testing.TB, spec *worldSpec) *world {
	clk := &vtime.Loop{}
	w := &world{t: t, spec: spec, clk: clk, byWaiter: map[*waiter]*worldReq{}}
	w.rng.arrivals = rand.New(rand.NewPCG(spec.seed, 0xa771))
	w.rng.sizes = rand.New(rand.NewPCG(spec.seed, 0x5123))
	w.rng.noise = rand.New(rand.NewPCG(spec.seed, 0x4015))
	w.rng.client = rand.New(rand.NewPCG(spec.seed, 0xc11e))
	w.reg = NewRegistry(clk)
	provs, err := w.reg.ReconcileProviders(map[string]ProviderSettings{"p": spec.set})
	if err != nil {
		t.Fatalf("%s: %v", spec, err)
	}
	w.prov = provs["p"]
	w.lim = w.prov.Limiter
	w.lim.resolved = func(wt *waiter) { w.resolved = append(w.resolved, wt) }
	w.grantTimes = make([][]time.Duration, 2*settings.MaxClasses)
	w.groupStats = make([]worldGroupStats, len(spec.groups))
	w.prevSets = []ProviderSettings{spec.set}

	if spec.knee == 0 {
		w.c = spec.capacity[0].V
		for _, st := range spec.capacity {
			w.at(st.At, func() { w.c = st.V; w.startQueued() })
		}
	}
	for _, rl := range spec.reloads {
		w.at(rl.at, func() { w.reload(rl) })
	}
	for gi := range spec.groups {
		g := &spec.groups[gi]
		if g.clients > 0 {
			for c := 0; c < g.clients; c++ {
				w.at(w.exp(g.think), func() { w.send(w.newReq(g, c)) })
			}
		} else if g.rate > 0 {
			w.nextArrival(g)
		}
	}
	w.at(100*time.Millisecond, w.audit)
	for {
		fn, ok := clk.Next(spec.duration)
		if !ok {
			break
		}
		fn()
		w.settleResolved()
	}
	w.drainAll()
	return w
}

func (w *world) exp(mean time.Duration) time.Duration {
	if mean <= 0 {
		return 0
	}
	return time.Duration(w.rng.arrivals.ExpFloat64() * float64(mean))
}

func (w *world) nextArrival(g *worldGroup) {
	d := time.Duration(w.rng.arrivals.ExpFloat64() / g.rate * float64(time.Second))
	w.at(w.now()+d, func() {
		w.send(w.newReq(g, -1))
		w.nextArrival(g)
	})
}

func (w *world) groupIndex(g *worldGroup) int {
	for i := range w.spec.groups {
		if &w.spec.groups[i] == g {
			return i
		}
	}
	return -1
}

func (w *world) newReq(g *worldGroup, client int) *worldReq {
	r := &worldReq{id: len(w.reqs), g: g, client: client}
	r.prompt = g.prompt.Draw(w.rng.sizes)
	r.out = g.output.Draw(w.rng.sizes)
	r.flow = Flow{Tenant: g.tenant, Class: g.class, Prompt: r.prompt, MaxWait: g.deadline}
	if g.maxTokens {
		r.flow.MaxOutput = r.out
	}
	w.reqs = append(w.reqs, r)
	return r
}

// send starts an attempt of r: the rate layer first, as the proxy does.
func (w *world) send(r *worldReq) {
	r.start = w.now()
	r.flow.Retry = r.attempt > 0
	w.groupStats[w.groupIndex(r.g)].attempts++
	maxWait := w.lim.MaxWaitFor(r.flow, -1)
	rates := w.prov.Rates
	if !rates.Needed(w.prov.Upstreams) {
		w.acquire(r, -1)
		return
	}
	out := 0
	if r.g.maxTokens {
		out = r.out
	}
	dec := rates.Reserve(w.clk.Now(), 0, rates.Demand(r.prompt, out), w.prov.Upstreams, maxWait, &r.res)
	if dec.TooLarge || dec.Limited {
		w.refused(r, "rate_limit", dec.RetryAfter)
		return
	}
	r.reserved = true
	if dec.Wait <= 0 {
		w.acquire(r, maxWait)
		return
	}
	r.state = wrRate
	gen := r.gen
	w.at(w.now()+dec.Wait, func() {
		if r.state == wrRate && r.gen == gen {
			w.acquire(r, maxWait-dec.Wait)
		}
	})
}

// acquire is Limiter.AcquireWithin, step by step.
func (w *world) acquire(r *worldReq, budget time.Duration) {
	f := r.flow
	if budget >= 0 {
		budget = max(budget, time.Nanosecond)
		if f.MaxWait <= 0 || budget < f.MaxWait {
			f.MaxWait = budget
		}
	}
	now := w.clk.Now()
	r.enq = w.now()
	if w.lim.TryAcquire(now, f, &r.p) {
		w.granted(r, true)
		return
	}
	wt, wait, err := w.lim.enqueue(now, f, &r.p)
	if err != nil {
		reason := "queue_full"
		switch {
		case errors.Is(err, ErrDeadline):
			reason = "queue_deadline"
			w.checkEarly(r, f)
		case errors.Is(err, ErrDisplaced):
			reason = "displaced"
		}
		w.refused(r, reason, r.p.Refusal().RetryAfter)
		return
	}
	if wait == 0 { // granted during enqueue
		w.resolved = slices.DeleteFunc(w.resolved, func(x *waiter) bool { return x == wt })
		w.take(r, wt, nil)
		return
	}
	r.state, r.w, r.deadline = wrQueued, wt, w.now()+wait
	r.est, r.grants = wt.told, wt.grants
	w.byWaiter[wt] = r
	gen := r.gen
	w.at(r.deadline, func() {
		if r.state == wrQueued && r.gen == gen {
			w.leave(r, ErrQueueTimeout)
		}
	})
	if r.g.giveUp > 0 && r.g.giveUp < wait {
		w.at(w.now()+r.g.giveUp, func() {
			if r.state == wrQueued && r.gen == gen {
				w.leave(r, ErrCanceled)
			}
		})
	}
}

// checkEarly records an early refusal for the counterfactual check: the
// requests the queue would have served before r.
func (w *world) checkEarly(r *worldReq, f Flow) {
	l := w.lim
	l.mu.Lock()
	defer l.mu.Unlock()
	qc := l.qc.Load()
	c := qc.classOf(f.Class)
	lvl := levelOf(c, f.Retry)
	t := l.tenants.get(f.Tenant)
	tag := l.q.startTag(t, lvl)
	chk := cfCheck{r: r, at: w.now(), deadline: w.now() + l.MaxWaitFor(f, -1), lvl: lvl}
	for _, wt := range l.q.all() {
		if int(wt.level) < lvl || (int(wt.level) == lvl && wt.tag+wt.lane.offset <= tag) {
			if o := w.byWaiter[wt]; o != nil {
				chk.ahead = append(chk.ahead, o)
			}
		}
	}
	if len(w.checks) < 2000 {
		w.checks = append(w.checks, chk)
	}
}

func (w *world) leave(r *worldReq, err error) {
	wt := r.w
	if w.lim.leave(wt, err) {
		w.waits[int(wt.level)/2].left++
		delete(w.byWaiter, wt)
		r.w = nil
		enq := w.clk.At(r.enq)
		err = w.lim.resolve(wt, enq, err, &r.p)
		if errors.Is(err, ErrCanceled) {
			w.canceled(r)
			return
		}
		w.refused(r, "queue_timeout", r.p.Refusal().RetryAfter)
		return
	}
	// Resolved first: the resolved hook has it.
}

// settleResolved turns the waiters the limiter resolved into outcomes.
func (w *world) settleResolved() {
	for len(w.resolved) > 0 {
		wt := w.resolved[0]
		w.resolved = w.resolved[1:]
		r := w.byWaiter[wt]
		if r == nil {
			w.fail("a waiter nobody waits for was resolved")
			continue
		}
		delete(w.byWaiter, wt)
		<-wt.ch // what Acquire's await takes
		r.left = w.lim.q.leftAbove(int(wt.level)) - wt.leftAt + w.lim.q.levels[wt.level].leavers.ahead(wt.enq, wt.served)
		w.take(r, wt, nil)
	}
}

// take resolves r's waiter: granted or displaced.
func (w *world) take(r *worldReq, wt *waiter, err error) {
	r.w = nil
	enq := w.clk.At(r.enq)
	if err = w.lim.resolve(wt, enq, err, &r.p); err != nil {
		w.refused(r, "displaced", r.p.Refusal().RetryAfter)
		return
	}
	w.waits[int(r.p.level)/2].served++
	w.granted(r, false)
}

// granted: r holds its permit; it goes to the provider a hop later.
func (w *world) granted(r *worldReq, fast bool) {
	r.gen++
	r.state, r.grantAt = wrHeld, w.now()
	w.held++
	w.maxHeld = max(w.maxHeld, w.held)
	lvl := int(r.p.level)
	w.grantTimes[lvl] = append(w.grantTimes[lvl], w.now())
	gs := &w.groupStats[w.groupIndex(r.g)]
	if r.start >= w.spec.warm {
		gs.waitSum += w.now() - r.start
		gs.waits++
	}
	// First attempts only: a retry waits behind the first attempts of its
	// class, those that arrive while it waits too, which no estimate made
	// when it arrived can count.
	if !fast && !r.flow.Retry && r.est > 0 && r.grants >= worldLongWait && r.enq >= w.spec.warm && !w.changedDuring(r.enq-2*time.Second, w.now()) {
		// Against the grants that were needed, as the calibration
		// window counts: waiters ahead that left needed none.
		g := r.grants
		c := int(r.p.level) / 2
		w.ratios[c] = append(w.ratios[c], float64(w.now()-r.enq)/float64(r.est)*g/max(g-float64(r.left), 1))
	}
	// Class shares: a grant never takes a class past its share.
	if cs := r.p.cls; cs.inflight.Load() > classCap(cs, w.lim.limit.Load()) {
		w.fail("class %s holds %d permits, over its cap %d", cs.name, cs.inflight.Load(), classCap(cs, w.lim.limit.Load()))
	}
	w.at(w.now()+time.Millisecond, func() { w.arrive(r) })
}

func (w *world) startQueued() {
	for len(w.pq) > 0 && w.running < w.c {
		r := w.pq[0]
		w.pq = w.pq[1:]
		w.start(r)
	}
}

// arrive: r reaches the provider.
func (w *world) arrive(r *worldReq) {
	s := w.spec
	switch {
	case s.knee > 0 && s.refuseAt > 0 && w.running >= s.refuseAt,
		s.knee == 0 && s.overload > 0 && float64(w.running+len(w.pq)) >= s.overload*float64(w.c):
		w.upstreamRefused(r)
	case s.knee > 0 || w.running < w.c:
		w.start(r)
	default:
		w.pq = append(w.pq, r)
	}
}

func (w *world) start(r *worldReq) {
	s := w.spec
	w.running++
	slow := 1.0
	if s.knee > 0 {
		slow = max(1, float64(w.running)/float64(s.knee))
	}
	f := math.Exp(s.jitter*w.rng.noise.NormFloat64()) * slow
	ttft := time.Duration((s.baseTTFT.Seconds() + float64(r.prompt)/8000) * f * 1e9)
	decode := time.Duration(float64(r.out) * s.itl.Seconds() * slow * 1e9)
	w.at(w.now()+ttft, func() {
		r.p.Observe(control.Sample{Kind: control.FirstToken, Now: w.clk.Now(), TTFT: w.now() - r.grantAt, PromptTokens: r.prompt})
		w.at(w.now()+decode, func() { w.finish(r) })
	})
}

func (w *world) finish(r *worldReq) {
	w.running--
	w.startQueued()
	now := w.clk.Now()
	if r.reserved {
		r.res.Settle(now, Usage{Sent: true, InputTokens: r.prompt, OutputTokens: r.out})
	}
	gs := &w.groupStats[w.groupIndex(r.g)]
	if r.start >= w.spec.warm {
		gs.served++
		gs.holdSum += w.now() - r.grantAt
		gs.holds++
	}
	w.release(r, Outcome{Kind: OutcomeSuccess, Tokens: r.prompt + r.out})
	w.end(r, "ok")
	w.next(r, 0, false)
}

func (w *world) upstreamRefused(r *worldReq) {
	const retryAfter = time.Second
	w.at(w.now()+time.Millisecond, func() {
		if r.reserved {
			r.res.Settle(w.clk.Now(), Usage{Sent: true})
		}
		w.release(r, Outcome{Kind: OutcomeDrop, Drop: control.DropRateLimit, RetryAfter: retryAfter})
		w.groupStats[w.groupIndex(r.g)].upstreamRefused++
		w.end(r, "upstream_429")
		w.next(r, retryAfter, true)
	})
}

func (w *world) release(r *worldReq, o Outcome) {
	if !r.p.Finish(w.clk.Now(), o) {
		w.fail("request %d: Finish on a permit not held", r.id)
	}
	w.held--
}

func (w *world) refused(r *worldReq, reason string, retryAfter time.Duration) {
	if r.reserved {
		r.res.Settle(w.clk.Now(), Usage{})
	}
	if r.start >= w.spec.warm {
		w.groupStats[w.groupIndex(r.g)].refused++
	}
	w.end(r, reason)
	w.next(r, retryAfter, true)
}

func (w *world) canceled(r *worldReq) {
	if r.reserved {
		r.res.Settle(w.clk.Now(), Usage{})
	}
	if r.start >= w.spec.warm {
		w.groupStats[w.groupIndex(r.g)].canceled++
	}
	w.end(r, "canceled")
	w.next(r, 0, false)
}

// end records that an attempt ended; each ends exactly once.
func (w *world) end(r *worldReq, outcome string) {
	r.ends++
	r.gen++
	if r.ends != 1 {
		w.fail("request %d ended %d times (%s, then %s)", r.id, r.ends, r.outcome, outcome)
	}
	r.state, r.outcome = wrDone, outcome
}

// next is what the client does after an attempt of r ended: retry (as
// the SDKs do, or hot), or go on (closed loop: think, then a new request).
func (w *world) next(r *worldReq, retryAfter time.Duration, refused bool) {
	g := r.g
	switch {
	case refused && g.hot:
		n := w.newReq(g, r.client)
		n.attempt = r.attempt + 1
		w.at(w.now()+max(g.hotDelay, time.Millisecond), func() { w.send(n) })
		return
	case refused && r.attempt < g.retries:
		d := retryAfter
		if d <= 0 || d > time.Minute {
			d = time.Duration(min(0.5*math.Pow(2, float64(r.attempt)), 8) * (1 - 0.25*w.rng.client.Float64()) * 1e9)
		}
		n := &worldReq{id: len(w.reqs), g: g, client: r.client, attempt: r.attempt + 1, prompt: r.prompt, out: r.out, flow: r.flow}
		w.reqs = append(w.reqs, n)
		w.at(w.now()+d, func() { w.send(n) })
		return
	}
	if r.client >= 0 {
		think := w.exp(g.think)
		if refused {
			think = max(think, 50*time.Millisecond) // a person or a job looks at the error
		}
		w.at(w.now()+think, func() { w.send(w.newReq(g, r.client)) })
	}
}

// reload applies a reload: accepted, the new settings (carried over by
// the registry as the proxy's Apply does); rejected, invalid settings that
// must leave everything as it was.
func (w *world) reload(rl worldReload) {
	cur := w.prevSets[len(w.prevSets)-1]
	if rl.reject {
		bad := cur
		bad.Limit.Ceiling = 0
		before := *w.lim.set.Load()
		if _, err := w.reg.ReconcileProviders(map[string]ProviderSettings{"p": bad}); err == nil {
			w.fail("invalid settings were accepted")
		}
		if after := *w.lim.set.Load(); after.Limit != before.Limit || after.Queue.MaxWait != before.Queue.MaxWait {
			w.fail("a rejected reload changed the limiter's settings")
		}
		return
	}
	next := cur
	next.Queue.Classes = slices.Clone(cur.Queue.Classes)
	rl.edit(&next)
	if _, err := w.reg.ReconcileProviders(map[string]ProviderSettings{"p": next}); err != nil {
		w.fail("reload rejected: %v", err)
		return
	}
	w.prevSets = append(w.prevSets, next)
}

// worldLongWait is the least number of grants a wait is estimated behind
// for its ratio to count in the calibration invariant: a wait behind a few
// grants is the sum of a few random gaps between streams ending (behind
// four, its 90th percentile is nearly twice its mean, however exact the
// estimate of the mean).
const worldLongWait = 16

// changedDuring reports whether a reload, a capacity step or a move of
// the adaptive limit by more than a quarter happened in [from, to]: a
// wait estimated before it could not know of it.
func (w *world) changedDuring(from, to time.Duration) bool {
	lo, hi := int64(math.MaxInt64), int64(0)
	for i := max(int(from/(100*time.Millisecond)), 0); i <= int(to/(100*time.Millisecond)) && i < len(w.limits); i++ {
		lo, hi = min(lo, w.limits[i]), max(hi, w.limits[i])
	}
	if hi > 0 && float64(hi) > 1.25*float64(lo) {
		return true
	}
	for _, rl := range w.spec.reloads {
		if !rl.reject && rl.at >= from && rl.at <= to {
			return true
		}
	}
	for _, st := range w.spec.capacity[min(1, len(w.spec.capacity)):] {
		if st.At >= from && st.At <= to {
			return true
		}
	}
	return false
}

// audit checks the permits every 100 ms: the limiter's count is the
// world's, and never above the highest ceiling configured.
func (w *world) audit() {
	if n := int(w.lim.inflight.Load()) - w.lim.Kept(); n != w.held {
		w.fail("limiter counts %d in flight (%d kept), the world %d", n, w.lim.Kept(), w.held)
	}
	w.maxLimit = max(w.maxLimit, w.lim.limit.Load())
	w.limits = append(w.limits, w.lim.limit.Load())
	ceil := 0
	for _, s := range w.prevSets {
		ceil = max(ceil, s.Limit.Ceiling)
	}
	if w.held > ceil {
		w.fail("%d permits held, above every ceiling configured (%d)", w.held, ceil)
	}
	w.at(w.now()+100*time.Millisecond, w.audit)
}

// drainAll ends the run: every waiter leaves (canceled), every request in
// flight finishes, and then nothing may be left in the limiter.
func (w *world) drainAll() {
	w.clk.AdvanceTo(w.spec.duration)
	for _, r := range w.reqs {
		if r.state == wrQueued && r.w != nil {
			if w.lim.leave(r.w, ErrCanceled) {
				delete(w.byWaiter, r.w)
				_ = w.lim.resolve(r.w, w.clk.At(r.enq), ErrCanceled, &r.p)
				r.w = nil
				w.end(r, "cut")
			}
			w.settleResolved()
		}
	}
	for _, r := range w.reqs {
		switch r.state {
		case wrHeld:
			if r.reserved {
				r.res.Settle(w.clk.Now(), Usage{Sent: true})
			}
			w.release(r, Outcome{})
			w.end(r, "cut")
		case wrRate:
			if r.reserved {
				r.res.Settle(w.clk.Now(), Usage{})
			}
			w.end(r, "cut")
		}
		w.settleResolved()
	}
	s := w.lim.Stats()
	if s.Inflight != 0 || s.Waiting != 0 || w.held != 0 {
		w.fail("after the run: %d in flight, %d waiting (world: %d held)", s.Inflight, s.Waiting, w.held)
	}
	for _, c := range s.Classes {
		if c.Inflight != 0 || c.Waiting != 0 {
			w.fail("after the run: class %s holds %d, %d waiting", c.Name, c.Inflight, c.Waiting)
		}
	}
	w.lim.tenants.each(func(t *tenant) {
		if t.word.Load() > 0 {
			w.fail("after the run: tenant %x still holds or waits (%x)", t.id, t.word.Load())
		}
	})
	for _, r := range w.reqs {
		if r.state != wrNew && r.ends != 1 {
			w.fail("request %d (state %d) ended %d times", r.id, r.state, r.ends)
		}
	}
}

// unnecessaryRefusals judges the early refusals: a request refused on its
// estimate would have had its permit no earlier than the last of the
// requests the queue would have served before it, then at the next grant
// to a request it outranks or equals (a lower bound of its wait, since
// requests arriving later might have gone first). Refused although that
// came well before its deadline (under frac of its wait budget) is an
// unnecessary refusal. Checks whose requests ahead had not all left the
// queue by the end are skipped.
func (w *world) unnecessaryRefusals(frac float64) (bad, judged int, worst string) {
	for _, c := range w.checks {
		from := c.at
		done := true
		for _, a := range c.ahead {
			switch {
			case a.state == wrQueued || a.state == wrNew || a.state == wrRate:
				done = false
			case a.grantAt > 0 && a.grantAt >= c.at:
				from = max(from, a.grantAt)
			}
		}
		if !done {
			continue
		}
		// The next grant at its level or a lower one, after from.
		grant := time.Duration(math.MaxInt64)
		for lvl := c.lvl; lvl < len(w.grantTimes); lvl++ {
			ts := w.grantTimes[lvl]
			i := sort.Search(len(ts), func(i int) bool { return ts[i] > from })
			if i < len(ts) {
				grant = min(grant, ts[i])
			}
		}
		if grant == math.MaxInt64 {
			continue
		}
		judged++
		if budget := c.deadline - c.at; grant-c.at < time.Duration(frac*float64(budget)) {
			bad++
			if worst == "" {
				worst = fmt.Sprintf("refused at %v with a deadline of %v, %d ahead: it would have had a permit after %v", c.at, budget, len(c.ahead), grant-c.at)
			}
		}
	}
	return bad, judged, worst
}
