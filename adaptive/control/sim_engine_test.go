package control

// Discrete-event simulation of Sluice in front of a simulated LLM provider,
// in virtual time: a priority queue of events, no network, no sleeping,
// seeded and deterministic. It runs the controllers against the provider
// shapes of the scenario suite (bench/scenario) and the held-out shapes
// (provider shapes the controllers were not tuned on), fast enough to run
// every shape with several seeds in a unit test.
// sim_scenarios_test.go holds the scenarios and their assertions,
// sim_report_test.go the measurements.
//
// Model (the same as bench/sim, in model time). Clients: closed loop (each
// client thinks, exponential, then sends and waits for the answer) or open
// loop (Poisson arrivals at a rate that may change over time); prompt and
// output sizes lognormal, clamped. Sluice: a request is dispatched while
// in-flight < min(controller limit, ceiling), else waits in a FIFO queue
// (max_waiting, then rejected at once; max_wait, then rejected); waiters
// are admitted on a release and when the limit rises; the permit is held
// for the whole stream; the controller gets FirstToken at the first token,
// Dropped on a refusal (with Retry-After), TokenRate every 32 output tokens
// after the first (as feedback.Meter raises them). Provider, queueing shape:
// at most C streams run (prefill and decode), the rest wait in a FIFO inside
// it; a request arriving when running+queued >= overload x C is refused.
// Processor-sharing shape (knee > 0): no queue, every stream runs, and TTFT
// and inter-token latency grow by running/knee beyond the knee; refused
// when running >= refuseAt. Without a knee (rise > 0) they grow by
// 1 + rise x running/riseRef at any load, and nothing is refused. TTFT = (0.25 s + prompt/8000 per s) x
// lognormal(jitter) x slowdown, read when the request starts running, plus
// the wait in the provider's queue; every running stream decodes at ITL =
// 20 ms x slowdown x (1 + running/itlRef) (queueing) or x max(1,
// running/knee) (processor sharing), re-evaluated whenever running or the
// shape changes (a shared token clock, so a run costs O(events log events),
// not O(tokens)). An optional hard request-rate limit (token bucket) refuses
// beyond it, and optional host stalls delay every first token and every
// output token due while they last.

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// simProvider describes the simulated provider; zero values are the
// simulated provider's defaults (bench/sim) where a default exists.
type simProvider struct {
	// schedule: capacity C from each step's start on. C <= 0 = unlimited.
	schedule []vtime.Step[int]
	// overload: refuse once running+queued >= overload*C (0 = never).
	overload float64
	// jitter is the sigma of the TTFT lognormal multiplier; 0 means 0.3.
	jitter float64
	// itlRef: ITL = 20ms*(1 + running/itlRef); 0 means C.
	itlRef float64
	// knee > 0 selects the processor-sharing shape (see the file comment);
	// refuseAt is its refusal point (0 = never).
	knee, refuseAt int
	// rise > 0 selects the processor-sharing shape without a knee (unless
	// knee is set too): TTFT and inter-token latency grow by
	// 1 + rise x running/riseRef, gently, so that completions keep rising
	// with concurrency however many streams run (a provider with room for
	// everything whose host fills up).
	rise    float64
	riseRef int
	// slow multiplies TTFT and ITL from each step on (1 before the first).
	slow []vtime.Step[float64]
	// rateRPS > 0: a hard request-rate limit, token bucket of rateBurst.
	rateRPS   float64
	rateBurst int
	// retryAfter is sent with every refusal.
	retryAfter time.Duration
	// stalls, when > 0: on average once per stalls the host stalls for
	// stallFor (exponential); every first token due meanwhile comes that
	// much later and the output tokens arrive at its end in one batch:
	// latency that has nothing to do with the load (a busy host, a paused
	// runtime, a slow network).
	stalls, stallFor time.Duration
}

// simLoad is the traffic: closed loop when clients > 0, else open loop at
// rate(t) (at most maxRate).
type simLoad struct {
	clients        int
	think          time.Duration
	rate           func(t time.Duration) float64
	maxRate        float64
	prompt, output vtime.Lognormal
	// nonStream is the share of requests that ask for a whole answer
	// (stream: false; 1 = all). The provider works the same; Sluice sees
	// no first token and no token rate for them, only the answer at the
	// end (Answered) or a refusal.
	nonStream float64
}

// simPhaseSpec names a period for per-phase figures; c is the capacity the
// limit is measured against there (0 = none).
type simPhaseSpec struct {
	name     string
	from, to time.Duration
	c        int
}

// simConfig is one run.
type simConfig struct {
	name     string
	settings settings.Limit
	provider simProvider
	load     simLoad
	duration time.Duration
	// ceilings, when set, changes Sluice's ceiling over time (the oracle:
	// a fixed limit that knows the capacity).
	ceilings   []vtime.Step[int]
	maxWait    time.Duration
	maxWaiting int
	phases     []simPhaseSpec
	seed       uint64
	// probe, when set, sees the controller's state after every sample.
	probe func(now time.Duration, st State)
	// onFirstToken, when set, sees every first token: when and its TTFT
	// at the provider.
	onFirstToken func(now, ttft time.Duration)
	// onController, when set, sees the controller before the run starts.
	onController func(Controller)
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
	firstTok, lastMark time.Duration
	inflightAtDispatch int
	whole              bool // a non-streaming request (simLoad.nonStream)
	streaming          bool // its first token was fed: counted in sim.streams
	state              simReqState
	startV, nextV      float64 // token clock at the first token; at the next event (mark or end)
	endV               float64
	idx                int // in simDecodeHeap
	client             int // closed loop: client id; -1 open loop
}

// simDecodeHeap orders decoding streams by the token-clock value of their
// next event (a token-rate mark or the end).
type simDecodeHeap []*simReq

func (h simDecodeHeap) Len() int           { return len(h) }
func (h simDecodeHeap) Less(i, j int) bool { return h[i].nextV < h[j].nextV }
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

type sim struct {
	pacing int // requests waiting for their dispatch slot
	cfg    simConfig
	clk    *vtime.Loop
	// One random stream per source, so that every variant of a seed sees
	// the same arrivals, request sizes (in dispatch order), provider noise
	// and stalls: a comparison between variants is paired, not only by
	// seed but by workload.
	arrivals, sizes, noise, stallRng *rand.Rand
	ctrl                             Controller
	res                              *simResult
	phase                            int

	// Sluice side
	inflight int
	streams  int // dispatched streams past their first token (Sample.Decoding)
	ceiling  int
	waitq    []*simReq

	// provider side
	c         int
	slow      float64
	running   int
	pq        []*simReq
	v         float64 // token clock: tokens each decoding stream has produced
	vAt       time.Duration
	decoding  simDecodeHeap
	decodeVer uint64
	tokens    float64 // rate-limit bucket
	tokensAt  time.Duration
	stallEnd  time.Duration
}

func (s *sim) at(t time.Duration, fn func()) { s.clk.Schedule(t, fn) }
func (s *sim) now() time.Duration            { return s.clk.Elapsed() }

func simRun(t testing.TB, cfg simConfig) *simResult {
	t.Helper()
	if cfg.maxWaiting == 0 {
		cfg.maxWaiting = 200
	}
	if cfg.maxWait == 0 {
		cfg.maxWait = 10 * time.Second
	}
	if cfg.provider.jitter == 0 {
		cfg.provider.jitter = 0.3
	}
	clk := &vtime.Loop{}
	ctrl, err := New(cfg.settings, clk)
	if err != nil {
		t.Fatalf("%s: %v", cfg.name, err)
	}
	s := &sim{cfg: cfg, clk: clk, ctrl: ctrl, ceiling: cfg.settings.Ceiling, slow: 1,
		arrivals: rand.New(rand.NewPCG(cfg.seed, 0x5eed)), sizes: rand.New(rand.NewPCG(cfg.seed, 0x51e5)),
		noise: rand.New(rand.NewPCG(cfg.seed, 0x4015e)), stallRng: rand.New(rand.NewPCG(cfg.seed, 0x57a11)),
		res: newSimResult(cfg)}
	if cfg.onController != nil {
		cfg.onController(ctrl)
	}
	s.tokens = float64(cfg.provider.rateBurst)
	for _, st := range cfg.provider.schedule {
		s.at(st.At, func() { s.setCapacity(st.V) })
	}
	for _, f := range cfg.provider.slow {
		s.at(f.At, func() { s.advance(); s.slow = f.V; s.reschedule() })
	}
	if p := cfg.provider; p.stalls > 0 {
		var stall func()
		stall = func() {
			s.stallEnd = s.now() + time.Duration(s.stallRng.ExpFloat64()*float64(p.stallFor))
			s.at(s.now()+time.Duration(s.stallRng.ExpFloat64()*float64(p.stalls)), stall)
		}
		s.at(time.Duration(s.stallRng.ExpFloat64()*float64(p.stalls)), stall)
	}
	for _, st := range cfg.ceilings {
		s.at(st.At, func() { s.ceiling = st.V; s.record(); s.admit() })
	}
	s.record()
	if cfg.load.clients > 0 {
		for i := 0; i < cfg.load.clients; i++ {
			s.think(i)
		}
	} else {
		s.nextArrival()
	}
	for {
		fn, ok := clk.Next(cfg.duration)
		if !ok {
			break
		}
		s.phaseAt()
		fn()
	}
	s.res.final = ctrl.State()
	return s.res
}

func (s *sim) phaseAt() {
	for s.phase+1 < len(s.res.phases) && s.now() >= s.res.phases[s.phase+1].from {
		s.phase++
	}
}

func (s *sim) cur() *simPhase { return &s.res.phases[s.phase] }

func (s *sim) limit() int { return min(s.ctrl.Limit(), s.ceiling) }

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
	if s.cfg.probe != nil {
		s.cfg.probe(s.now(), s.ctrl.State())
	}
	s.record()
	s.admit()
}

// --- clients ---

func (s *sim) think(client int) {
	d := time.Duration(s.arrivals.ExpFloat64() * float64(s.cfg.load.think))
	s.at(s.now()+d, func() { s.submit(client) })
}

func (s *sim) nextArrival() {
	l := s.cfg.load
	peak := l.maxRate
	if l.rate == nil {
		peak = l.maxRate
	}
	d := time.Duration(s.arrivals.ExpFloat64() / peak * float64(time.Second))
	accept := s.arrivals.Float64()
	s.at(s.now()+d, func() {
		if l.rate == nil || accept*peak < l.rate(s.now()) {
			s.submit(-1)
		}
		s.nextArrival()
	})
}

// done is called when a request ends for its client, whatever the outcome.
func (s *sim) done(r *simReq) {
	if r.client >= 0 {
		s.think(r.client)
	}
}

func (s *sim) submit(client int) {
	r := &simReq{client: client, enq: s.now()}
	if len(s.waitq) == 0 && s.inflight < s.limit() {
		s.dispatch(r)
		return
	}
	if len(s.waitq) >= s.cfg.maxWaiting {
		r.state = reqRejected
		s.cur().rejected++
		s.done(r)
		return
	}
	s.waitq = append(s.waitq, r)
	s.at(s.now()+s.cfg.maxWait, func() {
		if r.state == reqWaiting {
			r.state = reqRejected
			s.cur().rejected++
			s.done(r)
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
	// Sizes are drawn in dispatch order: nothing before the dispatch
	// depends on them, so the k-th request sent to the provider is the
	// same in every variant and a comparison is paired by the work the
	// provider is offered, not only by seed.
	r.prompt = s.cfg.load.prompt.Draw(s.sizes)
	r.out = s.cfg.load.output.Draw(s.sizes)
	if ns := s.cfg.load.nonStream; ns >= 1 {
		r.whole = true
	} else if ns > 0 {
		r.whole = s.sizes.Float64() < ns
	}
	s.inflight++
	r.state = reqDispatched
	s.cur().upstream++
	// A provider whose refusals call for pacing (dispatchPace) gets the
	// request at its slot; until then it holds its permit, and it is not
	// counted in flight at the provider. A slot beyond what is left of
	// the request's max wait is refused, as the proxy does.
	if pc, ok := s.ctrl.(interface {
		PaceWait(time.Time, time.Duration) (time.Duration, bool)
	}); ok {
		d, ok := pc.PaceWait(s.clk.Now(), max(s.cfg.maxWait-(s.now()-r.enq), 0))
		switch {
		case !ok:
			s.cur().upstream--
			s.cur().rejected++
			s.inflight--
			r.state = reqRejected
			s.admit()
			s.done(r)
			return
		case d > 0:
			s.pacing++
			s.at(s.now()+d, func() {
				s.pacing--
				s.send(r)
			})
			return
		}
	}
	s.send(r)
}

// send puts r on its way to the provider.
func (s *sim) send(r *simReq) {
	r.dispatched = s.now()
	r.inflightAtDispatch = s.inflight - s.pacing
	// The request reaches the provider a network hop later: requests
	// dispatched together (a limit increase admitting many waiters) are
	// all on their way before the first refusal among them comes back.
	s.at(s.now()+simHop, func() { s.arrive(r) })
}

// simHop is the one-way time between Sluice and the provider.
const simHop = time.Millisecond

func (s *sim) release(r *simReq) {
	r.state = reqDone
	s.inflight--
	if r.streaming {
		s.streams--
	}
	s.admit()
	s.done(r)
}

func (s *sim) sample(kind SampleKind, r *simReq) Sample {
	return Sample{Kind: kind, Dispatched: s.clk.At(r.dispatched), InflightAtDispatch: r.inflightAtDispatch, Decoding: s.streams}
}

// --- provider ---

// itl returns the seconds per token of every decoding stream now.
func (s *sim) itl() float64 {
	p := s.cfg.provider
	if p.processorSharing() {
		return 0.020 * s.slow * s.sharing()
	}
	ref := p.itlRef
	if ref == 0 {
		ref = float64(max(1, s.c))
	}
	return 0.020 * s.slow * (1 + float64(s.running)/ref)
}

// processorSharing reports whether the provider runs every stream at once
// (no queue inside it), slowing them all with the load.
func (p simProvider) processorSharing() bool { return p.knee > 0 || p.rise > 0 }

// sharing is the processor-sharing slowdown of TTFT and inter-token
// latency at the current load: running/knee beyond the knee, times
// 1 + rise x running/riseRef.
func (s *sim) sharing() float64 {
	p := s.cfg.provider
	f := 1.0
	if p.knee > 0 {
		f = max(1, float64(s.running)/float64(p.knee))
	}
	if p.rise > 0 {
		f *= 1 + p.rise*float64(s.running)/float64(p.riseRef)
	}
	return f
}

// advance moves the token clock to now at the ITL of the current state.
// Call before anything changes running, C or the slowdown.
func (s *sim) advance() {
	if dt := s.now() - s.vAt; dt > 0 {
		s.v += dt.Seconds() / s.itl()
	}
	s.vAt = s.now()
}

// reschedule plans the next decode event (a token-rate mark or the end of
// a stream) at the current ITL; earlier plans are void.
func (s *sim) reschedule() {
	s.decodeVer++
	if s.decoding.Len() == 0 {
		return
	}
	ver := s.decodeVer
	dt := (s.decoding[0].nextV - s.v) * s.itl()
	at := s.now() + time.Duration(math.Ceil(max(0, dt)*1e9))
	s.at(at, func() {
		if ver != s.decodeVer {
			return
		}
		s.advance()
		for s.decoding.Len() > 0 && s.decoding[0].nextV <= s.v+1e-6 {
			r := s.decoding[0]
			if r.nextV >= r.endV {
				heap.Pop(&s.decoding)
				s.finish(r)
				continue
			}
			s.mark(r)
			r.nextV = min(r.nextV+32, r.endV)
			heap.Fix(&s.decoding, 0)
		}
		s.reschedule()
	})
}

// mark raises a token-rate sample: 32 tokens since the previous mark.
//
// During a host stall the tokens arrive when it ends, all at once: the
// sample that spans the stall reads slow, and the next one, counted from
// the stall's end, fast.
func (s *sim) mark(r *simReq) {
	at := max(s.now(), s.stallEnd)
	if d := at - r.lastMark; d > 0 && !r.whole {
		smp := s.sample(TokenRate, r)
		smp.Rate = 32 / d.Seconds()
		if at > s.now() {
			s.at(at, func() { s.observe(smp) })
		} else {
			s.observe(smp)
		}
	}
	r.lastMark = at
}

func (s *sim) setCapacity(c int) {
	s.advance()
	s.c = c
	s.startQueued()
	s.reschedule()
}

func (s *sim) refuse(r *simReq) {
	s.cur().drops++
	smp := s.sample(Dropped, r)
	smp.Drop, smp.RetryAfter = DropRateLimit, s.cfg.provider.retryAfter
	s.observe(smp)
	s.res.drops = append(s.res.drops, simDropObs{t: s.now(), retryAfter: smp.RetryAfter, limitAfter: s.limit()})
	s.release(r)
}

// rateLimited takes a token from the request-rate bucket, or reports that
// there is none.
func (s *sim) rateLimited() bool {
	p := s.cfg.provider
	if p.rateRPS <= 0 {
		return false
	}
	s.tokens = min(float64(p.rateBurst), s.tokens+(s.now()-s.tokensAt).Seconds()*p.rateRPS)
	s.tokensAt = s.now()
	if s.tokens < 1 {
		return true
	}
	s.tokens--
	return false
}

func (s *sim) arrive(r *simReq) {
	p := s.cfg.provider
	switch {
	case s.rateLimited():
		s.refuse(r)
	case p.processorSharing():
		if p.refuseAt > 0 && s.running >= p.refuseAt {
			s.refuse(r)
			return
		}
		s.start(r)
	case s.c > 0 && p.overload > 0 && float64(s.running+len(s.pq)) >= p.overload*float64(s.c):
		s.refuse(r)
	case s.c <= 0 || s.running < s.c:
		s.start(r)
	default:
		s.pq = append(s.pq, r)
	}
}

func (s *sim) startQueued() {
	for len(s.pq) > 0 && (s.c <= 0 || s.running < s.c) {
		r := s.pq[0]
		s.pq = s.pq[1:]
		s.start(r)
	}
}

func (s *sim) start(r *simReq) {
	p := s.cfg.provider
	s.advance()
	s.running++
	s.reschedule()
	f := math.Exp(p.jitter*s.noise.NormFloat64()) * s.slow
	if p.processorSharing() {
		f *= s.sharing()
	}
	prefill := (0.25 + float64(r.prompt)/8000) * f
	due := s.now() + time.Duration(prefill*1e9)
	if due < s.stallEnd {
		due = s.stallEnd + (due - s.now())
	}
	s.at(due, func() { s.firstToken(r) })
}

func (s *sim) firstToken(r *simReq) {
	r.firstTok, r.lastMark = s.now(), s.now()
	ph := s.cur()
	ph.ttfts = append(ph.ttfts, r.firstTok-r.dispatched)
	ph.clientTTFTs = append(ph.clientTTFTs, r.firstTok-r.enq)
	if s.cfg.onFirstToken != nil {
		s.cfg.onFirstToken(s.now(), r.firstTok-r.dispatched)
	}
	s.advance()
	r.startV = s.v
	r.endV = s.v + float64(r.out-1)
	r.nextV = min(s.v+32, r.endV)
	heap.Push(&s.decoding, r)
	s.reschedule()
	if r.whole {
		return
	}
	s.streams++
	r.streaming = true
	smp := s.sample(FirstToken, r)
	smp.TTFT, smp.PromptTokens = r.firstTok-r.dispatched, r.prompt
	s.observe(smp)
}

func (s *sim) finish(r *simReq) {
	// s.advance() was called by the decode event.
	s.running--
	s.startQueued()
	ph := s.cur()
	ph.completed++
	ph.tokens += r.out
	if d := s.now() - r.firstTok; r.out > 1 && d > 0 {
		ph.rates = append(ph.rates, float64(r.out-1)/d.Seconds())
	}
	if r.whole {
		s.observe(s.sample(Answered, r))
	}
	s.release(r)
}
