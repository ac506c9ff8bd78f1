package adaptive

// Discrete-event simulation of Sluice in front of a simulated LLM provider,
// in virtual time: a priority queue of events, no network, no sleeping.
// It checks the controllers against the provider model of design.md §2 and
// prints the comparison table that BENCHMARKS.md quotes.
//
// Model. Clients: closed loop, think time exponential (mean 1 s), prompt
// tokens lognormal (mean 1000, sigma 0.5), output tokens lognormal (mean
// 250, sigma 0.5, cap 2000). Sluice: a request is dispatched while
// in-flight < min(controller limit, ceiling), else waits in a FIFO queue
// (max_wait 10 s, then rejected); waiters are admitted on a release and
// when the limit rises; the permit is held for the whole stream; the
// controller gets FirstToken at the first token, Dropped on a 429 and
// TokenRate at the end of a stream of >= 32 tokens. Provider: at most C
// streams run (prefill and decode), the rest wait in a FIFO inside it; a
// request arriving when running+queued >= 1.5 C is answered 429 at once
// (Retry-After 1 s); TTFT = (0.25 s + prompt/8000 s) x lognormal(sigma 0.3)
// + queue wait; every running stream decodes at ITL = 20 ms x
// (1 + running/C), re-evaluated whenever running or C changes (a shared
// token clock, so a run costs O(requests log requests), not O(tokens)).

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// simClock is the controllers' Clock: the event loop's current time.
type simClock struct {
	base time.Time
	now  time.Duration
}

func (c *simClock) Now() time.Time { return c.base.Add(c.now) }

type simEvent struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type simEventHeap []simEvent

func (h simEventHeap) Len() int { return len(h) }
func (h simEventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h simEventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *simEventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *simEventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type simReqState uint8

const (
	reqWaiting simReqState = iota
	reqDispatched
	reqRejected
	reqDone
)

type simReq struct {
	prompt, out        int
	enq, dispatched    time.Duration
	firstTok           time.Duration
	inflightAtDispatch int
	state              simReqState
	finishV            float64 // decode: the provider's token clock value at which it ends
	idx                int     // in simDecodeHeap
	client             *simClientState
}

type simClientState struct{ id int }

// simDecodeHeap orders decoding streams by the token-clock value at which
// they finish.
type simDecodeHeap []*simReq

func (h simDecodeHeap) Len() int           { return len(h) }
func (h simDecodeHeap) Less(i, j int) bool { return h[i].finishV < h[j].finishV }
func (h simDecodeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *simDecodeHeap) Push(x any) { r := x.(*simReq); r.idx = len(*h); *h = append(*h, r) }
func (h *simDecodeHeap) Pop() any {
	old := *h
	r := old[len(old)-1]
	*h = old[:len(old)-1]
	return r
}

// simProviderModel describes the simulated provider.
type simProviderModel struct {
	// schedule: capacity C from each step's start on. C <= 0 = unlimited.
	schedule []simStep
	// overload: 429 once running+queued >= overload*C (0 = never).
	overload float64
	// itlDiv: ITL = 20ms * (1 + running/itlDiv); 0 = use C.
	itlDiv float64
	// retryAfter sent with a 429.
	retryAfter time.Duration
	// rateLimit, when > 0: a hard request-rate limit; more than rateLimit
	// dispatches within one second answer 429 with retryAfter.
	rateLimit int
}

type simStep struct {
	at time.Duration
	c  int
}

// simConfig is one run.
type simConfig struct {
	name     string
	settings Settings
	provider simProviderModel
	duration time.Duration
	clients  int
	maxWait  time.Duration
	seed     uint64
	// target: see simResult.target.
	target int
	// probe, when set, is called every probeEvery of virtual time with the
	// controller's state (for debugging and for the Retry-After checks).
	probe      func(t time.Duration, st ControllerState)
	probeEvery time.Duration
}

// simResult holds what one run measured, per phase of the schedule.
type simResult struct {
	name      string
	phases    []simPhase
	trace     []simPoint // effective limit after every change
	drops     []simDropObs
	finalInfo ControllerState
	// target is what settle measures against when a phase has no capacity
	// limit (C <= 0): the limit the scenario expects.
	target int
}

type simPhase struct {
	start, end time.Duration
	c          int
	completed  int
	upstream   int // dispatched upstream
	drops      int // upstream 429s
	rejected   int // Sluice max_wait rejections
	ttfts      []time.Duration
}

type simPoint struct {
	t time.Duration
	v int
}

type simDropObs struct {
	t          time.Duration
	retryAfter time.Duration
	limitAfter int
}

type sim struct {
	cfg   simConfig
	clk   *simClock
	ev    simEventHeap
	seq   uint64
	rng   *rand.Rand
	ctrl  Controller
	res   *simResult
	phase int

	// Sluice side
	inflight int
	waitq    []*simReq

	// provider side
	c         int
	running   int
	pq        []*simReq
	v         float64 // token clock: tokens each decoding stream has produced
	vAt       time.Duration
	decoding  simDecodeHeap
	decodeVer uint64
	rateWin   time.Duration
	rateCount int
}

func (s *sim) at(t time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.ev, simEvent{at: t, seq: s.seq, fn: fn})
}

func (s *sim) now() time.Duration { return s.clk.now }

func simLognormal(r *rand.Rand, mean, sigma float64) float64 {
	mu := math.Log(mean) - sigma*sigma/2
	return math.Exp(mu + sigma*r.NormFloat64())
}

func simRun(t testing.TB, cfg simConfig) *simResult {
	t.Helper()
	clk := &simClock{base: time.Unix(1_700_000_000, 0)}
	ctrl, err := NewController(cfg.settings, clk)
	if err != nil {
		t.Fatalf("%s: %v", cfg.name, err)
	}
	s := &sim{cfg: cfg, clk: clk, ctrl: ctrl, rng: rand.New(rand.NewPCG(cfg.seed, 0x5eed)), res: &simResult{name: cfg.name, target: cfg.target}}
	for i, st := range cfg.provider.schedule {
		end := cfg.duration
		if i+1 < len(cfg.provider.schedule) {
			end = cfg.provider.schedule[i+1].at
		}
		s.res.phases = append(s.res.phases, simPhase{start: st.at, end: end, c: st.c})
		st := st
		s.at(st.at, func() { s.setCapacity(st.c) })
	}
	s.record()
	if cfg.probe != nil {
		var tick func()
		tick = func() {
			cfg.probe(s.now(), ctrl.State())
			s.at(s.now()+cfg.probeEvery, tick)
		}
		s.at(0, tick)
	}
	for i := 0; i < cfg.clients; i++ {
		cl := &simClientState{id: i}
		s.at(time.Duration(s.rng.Float64()*float64(time.Second)), func() { s.submit(cl) })
	}
	for s.ev.Len() > 0 {
		e := heap.Pop(&s.ev).(simEvent)
		if e.at >= cfg.duration {
			break
		}
		s.clk.now = e.at
		s.phaseAt()
		e.fn()
	}
	s.res.finalInfo = ctrl.State()
	return s.res
}

func (s *sim) phaseAt() {
	for s.phase+1 < len(s.res.phases) && s.now() >= s.res.phases[s.phase+1].start {
		s.phase++
	}
}

func (s *sim) cur() *simPhase { return &s.res.phases[s.phase] }

func (s *sim) limit() int { return min(s.ctrl.Limit(), s.cfg.settings.Ceiling) }

func (s *sim) record() {
	v := s.limit()
	if n := len(s.res.trace); n > 0 && s.res.trace[n-1].v == v {
		return
	}
	s.res.trace = append(s.res.trace, simPoint{s.now(), v})
}

func (s *sim) observe(smp Sample) {
	smp.Now = s.clk.Now()
	s.ctrl.Observe(smp)
	s.record()
	s.admit()
}

// --- clients ---

func (s *sim) think(cl *simClientState) {
	d := time.Duration(s.rng.ExpFloat64() * float64(time.Second))
	s.at(s.now()+d, func() { s.submit(cl) })
}

func (s *sim) submit(cl *simClientState) {
	r := &simReq{
		client: cl,
		prompt: int(simLognormal(s.rng, 1000, 0.5)),
		out:    min(2000, max(1, int(simLognormal(s.rng, 250, 0.5)))),
		enq:    s.now(),
	}
	if len(s.waitq) == 0 && s.inflight < s.limit() {
		s.dispatch(r)
		return
	}
	s.waitq = append(s.waitq, r)
	s.at(s.now()+s.cfg.maxWait, func() {
		if r.state == reqWaiting {
			r.state = reqRejected
			s.cur().rejected++
			s.think(cl)
		}
	})
}

// --- Sluice admission: inflight < min(limit, ceiling), FIFO queue ---

func (s *sim) admit() {
	for len(s.waitq) > 0 {
		r := s.waitq[0]
		if r.state != reqWaiting {
			s.waitq = s.waitq[1:]
			continue
		}
		if s.inflight >= s.limit() {
			return
		}
		s.waitq = s.waitq[1:]
		s.dispatch(r)
	}
}

func (s *sim) dispatch(r *simReq) {
	s.inflight++
	r.state = reqDispatched
	r.dispatched = s.now()
	r.inflightAtDispatch = s.inflight
	s.cur().upstream++
	s.arrive(r)
}

func (s *sim) release(r *simReq) {
	r.state = reqDone
	s.inflight--
	s.admit()
	s.think(r.client)
}

// --- provider ---

func (s *sim) itl() float64 { // seconds per token per stream
	div := s.cfg.provider.itlDiv
	if div == 0 {
		div = float64(s.c)
	}
	return 0.020 * (1 + float64(s.running)/div)
}

// advance moves the token clock to now at the ITL of the current running
// count. Call before anything changes running or C.
func (s *sim) advance() {
	if dt := s.now() - s.vAt; dt > 0 {
		s.v += dt.Seconds() / s.itl()
	}
	s.vAt = s.now()
}

func (s *sim) reschedule() {
	s.decodeVer++
	if s.decoding.Len() == 0 {
		return
	}
	ver := s.decodeVer
	dt := (s.decoding[0].finishV - s.v) * s.itl()
	at := s.now() + time.Duration(math.Ceil(max(0, dt)*1e9))
	s.at(at, func() {
		if ver != s.decodeVer {
			return
		}
		s.advance()
		for s.decoding.Len() > 0 && s.decoding[0].finishV <= s.v+1e-6 {
			s.finish(heap.Pop(&s.decoding).(*simReq))
		}
		s.reschedule()
	})
}

func (s *sim) unlimited() bool { return s.c <= 0 }

func (s *sim) setCapacity(c int) {
	s.advance()
	s.c = c
	s.startQueued()
	s.reschedule()
}

func (s *sim) arrive(r *simReq) {
	p := s.cfg.provider
	reject := false
	if p.rateLimit > 0 {
		if s.now()-s.rateWin >= time.Second {
			s.rateWin, s.rateCount = s.now(), 0
		}
		s.rateCount++
		reject = s.rateCount > p.rateLimit
	}
	if !s.unlimited() && p.overload > 0 && float64(s.running+len(s.pq)) >= p.overload*float64(s.c) {
		reject = true
	}
	if reject {
		s.cur().drops++
		s.observe(Sample{Kind: Dropped, Dispatched: s.clk.base.Add(r.dispatched), InflightAtDispatch: r.inflightAtDispatch,
			Drop: DropRateLimit, RetryAfter: p.retryAfter})
		s.res.drops = append(s.res.drops, simDropObs{t: s.now(), retryAfter: p.retryAfter, limitAfter: s.limit()})
		s.release(r)
		return
	}
	if s.unlimited() || s.running < s.c {
		s.start(r)
		return
	}
	s.pq = append(s.pq, r)
}

func (s *sim) startQueued() {
	for len(s.pq) > 0 && (s.unlimited() || s.running < s.c) {
		r := s.pq[0]
		s.pq = s.pq[1:]
		s.start(r)
	}
}

func (s *sim) start(r *simReq) {
	s.advance()
	s.running++
	s.reschedule()
	jitter := math.Exp(0.3 * s.rng.NormFloat64())
	prefill := (0.25 + float64(r.prompt)/8000) * jitter
	s.at(s.now()+time.Duration(prefill*1e9), func() { s.firstToken(r) })
}

func (s *sim) firstToken(r *simReq) {
	r.firstTok = s.now()
	ttft := r.firstTok - r.dispatched
	ph := s.cur()
	ph.ttfts = append(ph.ttfts, ttft)
	s.advance()
	r.finishV = s.v + float64(r.out)
	heap.Push(&s.decoding, r)
	s.reschedule()
	s.observe(Sample{Kind: FirstToken, Dispatched: s.clk.base.Add(r.dispatched), InflightAtDispatch: r.inflightAtDispatch,
		TTFT: ttft, PromptTokens: r.prompt})
}

func (s *sim) finish(r *simReq) {
	// s.advance() was called by the decode event.
	s.running--
	s.startQueued()
	s.cur().completed++
	if r.out >= 32 {
		if d := s.now() - r.firstTok; d > 0 {
			s.observe(Sample{Kind: TokenRate, Dispatched: s.clk.base.Add(r.dispatched), InflightAtDispatch: r.inflightAtDispatch,
				Rate: float64(r.out) / d.Seconds()})
		}
	}
	s.release(r)
}

// --- analysis ---

// avgLimit is the time-weighted mean effective limit over [from, to).
func (r *simResult) avgLimit(from, to time.Duration) float64 {
	var sum float64
	for i, p := range r.trace {
		end := to
		if i+1 < len(r.trace) {
			end = min(end, r.trace[i+1].t)
		}
		start := max(p.t, from)
		if end > start {
			sum += float64(p.v) * (end - start).Seconds()
		}
	}
	return sum / (to - from).Seconds()
}

// limitAt returns the effective limit at t.
func (r *simResult) limitAt(t time.Duration) int {
	i, _ := slices.BinarySearchFunc(r.trace, t, func(p simPoint, t time.Duration) int {
		if p.t <= t {
			return -1
		}
		return 1
	})
	return r.trace[max(0, i-1)].v
}

// settle returns how long after the phase start the limit entered
// [0.75C, 1.25C] for good (until the phase end), or -1 if it never did. A
// phase without a capacity limit is measured against r.target.
func (r *simResult) settle(ph simPhase) time.Duration {
	c := ph.c
	if c <= 0 {
		c = r.target
	}
	lo, hi := 0.75*float64(c), 1.25*float64(c)
	in := func(v int) bool { return float64(v) >= lo && float64(v) <= hi }
	since := ph.start
	if !in(r.limitAt(ph.start)) {
		since = -1
	}
	for _, p := range r.trace {
		if p.t <= ph.start || p.t >= ph.end {
			continue
		}
		switch {
		case !in(p.v):
			since = -1
		case since < 0:
			since = p.t
		}
	}
	if since < 0 {
		return -1
	}
	return since - ph.start
}

func (ph simPhase) rps() float64 { return float64(ph.completed) / (ph.end - ph.start).Seconds() }

func simPercentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// simRow is one line of the printed table: one controller, averaged over
// runs with different seeds.
type simRow struct {
	name    string
	rps     []float64       // per phase, mean over runs
	drops   float64         // upstream 429s per run
	rejects float64         // Sluice max_wait rejections per run
	ttfts   []time.Duration // upstream TTFT of every request of every run
	limits  []float64       // per phase: mean limit over its last 30%
	settles []time.Duration // per phase: worst run; -1 = some run never settled
}

// simrowOf aggregates runs of one controller. phaseRun picks, per phase, which
// run list to take that phase from (the fixed@C oracle mixes runs); nil
// means runs.
func simRowOf(name string, runs []*simResult, phaseRun func(phase int) []*simResult) simRow {
	row := simRow{name: name}
	if phaseRun == nil {
		phaseRun = func(int) []*simResult { return runs }
	}
	for i := range runs[0].phases {
		var rps, lim float64
		worst := time.Duration(0)
		pr := phaseRun(i)
		for _, r := range pr {
			ph := r.phases[i]
			rps += ph.rps()
			row.drops += float64(ph.drops)
			row.rejects += float64(ph.rejected)
			row.ttfts = append(row.ttfts, ph.ttfts...)
			tail := ph.end - (ph.end-ph.start)*3/10
			lim += r.avgLimit(tail, ph.end)
			if s := r.settle(ph); s < 0 || worst < 0 {
				worst = -1
			} else {
				worst = max(worst, s)
			}
		}
		n := float64(len(pr))
		row.rps = append(row.rps, rps/n)
		row.limits = append(row.limits, lim/n)
		row.settles = append(row.settles, worst)
	}
	row.drops /= float64(len(runs))
	row.rejects /= float64(len(runs))
	return row
}

func simTable(rows []simRow) string {
	var b strings.Builder
	b.WriteString("| controller | req/s per phase | upstream 429s | Sluice rejects | upstream TTFT p50 / p99 | limit (mean of last 30% of phase) | time to settle within ±25% of C |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		var rps, lims, sets []string
		for i := range row.rps {
			rps = append(rps, fmt.Sprintf("%.2f", row.rps[i]))
			lims = append(lims, fmt.Sprintf("%.1f", row.limits[i]))
			if row.settles[i] < 0 {
				sets = append(sets, "never")
			} else {
				sets = append(sets, fmt.Sprintf("%.0fs", row.settles[i].Seconds()))
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %.2fs / %.2fs | %s | %s |\n", row.name, strings.Join(rps, " / "),
			row.drops, row.rejects, simPercentile(row.ttfts, 0.5).Seconds(), simPercentile(row.ttfts, 0.99).Seconds(),
			strings.Join(lims, " / "), strings.Join(sets, " / "))
	}
	return b.String()
}

// --- scenarios ---

// simSeeds are the seeds every scenario runs with; assertions use the mean
// over them, so that one lucky or unlucky draw neither passes nor fails a
// controller.
func simSeeds() []uint64 {
	if testing.Short() {
		return []uint64{1, 2}
	}
	return []uint64{1, 2, 3, 4}
}

func simSettings(algo string, ceiling int) Settings {
	s := DefaultSettings()
	s.Algorithm = algo
	s.Ceiling = ceiling
	s.Initial = min(s.Initial, ceiling)
	s.Min = min(s.Min, ceiling)
	return s
}

func simRunSeeds(t testing.TB, cfg simConfig) []*simResult {
	var out []*simResult
	for _, seed := range simSeeds() {
		cfg.seed = seed
		out = append(out, simRun(t, cfg))
	}
	return out
}

// simcapacityRun is the scenario of design.md §2: hidden capacity C = 40 for
// 120 s, 20 for 120 s, 40 for 120 s; 429 (Retry-After 1 s) once
// running+queued >= 1.5 C; 200 closed-loop clients with 1 s mean think time
// and a 10 s max_wait in Sluice's queue.
func simCapacityRun(name string, s Settings) simConfig {
	return simConfig{
		name:     name,
		settings: s,
		provider: simProviderModel{
			schedule:   []simStep{{0, 40}, {120 * time.Second, 20}, {240 * time.Second, 40}},
			overload:   1.5,
			retryAfter: time.Second,
		},
		duration: 360 * time.Second,
		clients:  200,
		maxWait:  10 * time.Second,
	}
}

// TestSimCapacity runs the capacity schedule against fixed limits, AIMD and
// Gradient2 (ceiling 100), prints the table for BENCHMARKS.md, and checks
// Gradient2: limit within ±25% of C at the end of every phase, at least 50x
// fewer upstream 429s than fixed at the ceiling, and at least 90% of the
// throughput of the best fixed limit among 0.75C, C and 1.25C per phase.
func TestSimCapacity(t *testing.T) {
	phaseC := []int{40, 20, 40}
	fixed := map[int][]*simResult{}
	for _, c := range []int{20, 40} {
		for _, l := range []int{c * 3 / 4, c, c * 5 / 4} {
			if fixed[l] == nil {
				fixed[l] = simRunSeeds(t, simCapacityRun(fmt.Sprintf("fixed@%d", l), simSettings(AlgorithmFixed, l)))
			}
		}
	}
	ceil := simRunSeeds(t, simCapacityRun("fixed@ceiling", simSettings(AlgorithmFixed, 100)))
	aimd := simRunSeeds(t, simCapacityRun("aimd", simSettings(AlgorithmAIMD, 100)))
	g2 := simRunSeeds(t, simCapacityRun("gradient2", simSettings(AlgorithmGradient2, 100)))
	// Informational: the set-point mode, which trades TTFT for concurrency
	// on purpose (no assertions; TestSetpoint* cover it).
	targeted := simSettings(AlgorithmGradient2, 100)
	targeted.TTFTTarget = time.Second
	g2t := simRunSeeds(t, simCapacityRun("gradient2", targeted))

	g2row := simRowOf("gradient2", g2, nil)
	ceilRow := simRowOf("fixed@100 (ceiling)", ceil, nil)
	oracle := simRowOf("fixed@C (oracle 40/20/40)", fixed[40], func(i int) []*simResult { return fixed[phaseC[i]] })
	rows := []simRow{ceilRow, oracle, simRowOf("aimd", aimd, nil), g2row, simRowOf("gradient2, ttft_target 1s", g2t, nil)}
	t.Logf("capacity C = 40 -> 20 -> 40 (120 s each), 200 clients, ceiling 100, mean of %d seeds:\n%s", len(simSeeds()), simTable(rows))

	var fixedRows []simRow
	for _, l := range []int{15, 20, 25, 30, 40, 50} {
		fixedRows = append(fixedRows, simRowOf(fmt.Sprintf("fixed@%d", l), fixed[l], nil))
	}
	t.Logf("fixed limits for reference:\n%s", simTable(fixedRows))
	t.Logf("gradient2 final state (seed %d): %+v", simSeeds()[0], g2[0].finalInfo)

	for i, c := range phaseC {
		if lim := g2row.limits[i]; lim < 0.75*float64(c) || lim > 1.25*float64(c) {
			t.Errorf("gradient2 phase %d (C=%d): mean limit over the last 30%% = %.1f, want within ±25%% of C", i+1, c, lim)
		}
		best, bestName := 0.0, ""
		for _, l := range []int{c * 3 / 4, c, c * 5 / 4} {
			if r := simRowOf("", fixed[l], nil).rps[i]; r > best {
				best, bestName = r, fmt.Sprintf("fixed@%d", l)
			}
		}
		got := g2row.rps[i]
		t.Logf("phase %d (C=%d): gradient2 %.2f req/s = %.0f%% of the best fixed (%s, %.2f req/s)", i+1, c, got, 100*got/best, bestName, best)
		if got < 0.9*best {
			t.Errorf("gradient2 phase %d (C=%d): %.2f req/s < 90%% of %s (%.2f req/s)", i+1, c, got, bestName, best)
		}
	}
	if ceilRow.drops < 1000 {
		t.Errorf("fixed@ceiling saw only %.0f upstream 429s per run; the scenario does not overload the provider", ceilRow.drops)
	}
	if g2row.drops*50 > ceilRow.drops {
		t.Errorf("gradient2: %.0f upstream 429s per run, want at least 50x fewer than fixed@ceiling (%.0f)", g2row.drops, ceilRow.drops)
	}
}

// simdecodeRun is a decode-bound provider: no capacity limit, no 429s, TTFT
// flat (no queue), inter-token latency 20 ms x (1 + running/10), so every
// stream slows as concurrency grows. A 20 tokens/s floor per stream is met
// at running = 10 x (50/20 - 1) = 15.
func simDecodeRun(name string, floor float64) simConfig {
	s := simSettings(AlgorithmGradient2, 100)
	s.MinTokenRate = floor
	return simConfig{
		name:     name,
		settings: s,
		provider: simProviderModel{schedule: []simStep{{0, 0}}, itlDiv: 10},
		duration: 300 * time.Second,
		clients:  200,
		maxWait:  10 * time.Second,
		target:   15,
	}
}

// TestSimDecodeBound checks that the token-rate floor holds the limit where
// the per-stream rate meets it (about 15), while without a floor the limit
// climbs towards the ceiling because neither TTFT nor loss says anything.
func TestSimDecodeBound(t *testing.T) {
	withFloor := simRunSeeds(t, simDecodeRun("gradient2 + min_token_rate 20", 20))
	noFloor := simRunSeeds(t, simDecodeRun("gradient2, no floor", 0))
	rows := []simRow{simRowOf(noFloor[0].name, noFloor, nil), simRowOf(withFloor[0].name, withFloor, nil)}
	t.Logf("decode-bound provider (ITL = 20ms x (1 + running/10)), ceiling 100, 300 s, mean of %d seeds; settle is towards 15 ± 25%%:\n%s", len(simSeeds()), simTable(rows))
	var rates []float64
	for _, r := range withFloor {
		rates = append(rates, r.finalInfo.TokenRate)
	}
	t.Logf("last token-rate sample per run with the floor: %.1f tokens/s", rates)
	if lim := rows[1].limits[0]; lim < 15*0.75 || lim > 15*1.25 {
		t.Errorf("with min_token_rate 20: mean limit over the last 30%% = %.1f, want 15 ± 25%%", lim)
	}
	if lim := rows[0].limits[0]; lim < 50 {
		t.Errorf("without a floor the limit settled at %.1f; the scenario should let it climb (is it really decode-bound?)", lim)
	}
}

// TestSimRetryAfterFreeze runs a provider with a hard request-rate limit
// (more than 3 dispatches in a second -> 429 with Retry-After 5 s) and
// checks that the limit never grows within 5 s of a drop, yet does grow
// again between freezes.
func TestSimRetryAfterFreeze(t *testing.T) {
	for _, algo := range []string{AlgorithmGradient2, AlgorithmAIMD} {
		cfg := simConfig{
			name:     algo,
			settings: simSettings(algo, 100),
			provider: simProviderModel{
				schedule:   []simStep{{0, 40}},
				overload:   1.5,
				rateLimit:  3,
				retryAfter: 5 * time.Second,
			},
			duration: 300 * time.Second,
			clients:  200,
			maxWait:  10 * time.Second,
			seed:     1,
		}
		r := simRun(t, cfg)
		if len(r.drops) == 0 {
			t.Fatalf("%s: the rate-limited provider never answered 429", algo)
		}
		violations, grew := 0, 0 // increases inside / outside a freeze
		for _, d := range r.drops {
			for _, p := range r.trace {
				if p.t > d.t && p.t < d.t+d.retryAfter && p.v > d.limitAfter {
					violations++
					if violations <= 3 {
						t.Errorf("%s: limit rose to %d at %v, within Retry-After %v of a drop at %v (limit then %d)",
							algo, p.v, p.t, d.retryAfter, d.t, d.limitAfter)
					}
				}
			}
		}
		for i := 1; i < len(r.trace); i++ {
			if r.trace[i].v > r.trace[i-1].v {
				grew++
			}
		}
		t.Logf("%s: %d upstream 429s (Retry-After 5 s), %d limit increases in total, %d of them inside a freeze, final limit %d",
			algo, len(r.drops), grew, violations, r.trace[len(r.trace)-1].v)
		if grew == 0 {
			t.Errorf("%s: the limit never grew; a freeze must end", algo)
		}
	}
}
