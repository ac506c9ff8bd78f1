package cluster

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// A fleet in virtual time: replicas with closed-loop clients, heartbeats
// out of step, a map that stands for Redis, and a policy that turns what a
// heartbeat reads into caps. The shared-mode policy calls the functions
// the coordinator calls (allocate, headroom, firstClaim, slack, holdFor)
// in the coordinator's order, so the model checks the share maths and the
// protocol's timing together, without Redis and without wall clocks.
// Strict mode (one semaphore for the fleet, first come first served) is
// what the fleet could have in flight.

// world is one fleet and its load.
type world struct {
	seed    uint64
	ceiling int
	hb      time.Duration
	clients []int         // closed-loop clients per replica
	ctrl    []int         // per replica: its own controller's limit (0: the ceiling)
	think   time.Duration // clients' mean think time (exponential; 0: none)
	service time.Duration // mean stream length
	sigma   float64       // lognormal sigma of the stream length
	rtt     time.Duration // a round trip to the store
	jitter  time.Duration // a heartbeat's scheduling delay, uniform in [0, jitter)
	aligned bool          // heartbeats in step (within a millisecond)
	// start is when the clients start, over a second; heartbeats run from
	// 0. Fill is measured from settle to duration; overshoot from a second
	// after start.
	start, settle, duration time.Duration
	changes                 []demandChange
}

// demandChange sets replica r's clients to n at time at.
type demandChange struct {
	at   time.Duration
	r, n int
}

func (w world) String() string {
	return fmt.Sprintf("seed %d ceiling %d heartbeat %s clients %v ctrl %v think %s service %s (sigma %.1f) aligned %v changes %v",
		w.seed, w.ceiling, w.hb, w.clients, w.ctrl, w.think, w.service, w.sigma, w.aligned, w.changes)
}

// modelResult is what a world measured.
type modelResult struct {
	mean    float64 // time-averaged fleet in flight from settle on
	peak    int     // most in flight at once from a second after start
	over110 float64 // share of the time from a second after start above 110% of the ceiling
}

func (r modelResult) String() string {
	return fmt.Sprintf("mean %.2f peak %d over 110%% %.2f%% of the time", r.mean, r.peak, 100*r.over110)
}

// policy is a fleet mode.
type policy interface {
	name() string
	// start sets a replica's cap before its first heartbeat.
	start(m *model, r *modelReplica)
	// beat runs replica r's heartbeat at m.now; it schedules what follows
	// (the store's answers after a round trip).
	beat(m *model, r *modelReplica)
}

// modelReplica is one replica's state.
type modelReplica struct {
	id       string
	idx      int
	active   int   // clients that exist now
	inflight int   //
	queue    []int // clients waiting
	since    []int // their arrival order (strict mode's FIFO)
	cap      int   // the fleet cap applied
	ctrl     int   // its own controller's limit; 0: none

	// The coordinator's state (provider.go).
	claim    int
	peak     int           // demand sampled since the last heartbeat
	lastHeld time.Duration // when it last had demand or a share of slack
	beats    int           // heartbeats answered
}

func (r *modelReplica) want() int { return r.inflight + len(r.queue) }

// own is adaptive.Limiter.FleetDemand's own.
func (r *modelReplica) own(ceiling int) int {
	if r.ctrl > 0 {
		return min(r.ctrl, ceiling)
	}
	return ceiling
}

func (r *modelReplica) limit(ceiling int) int {
	return max(1, min(r.own(ceiling), r.cap)) // the limiter's minimum of one permit
}

type event struct {
	at   time.Duration
	seq  int
	kind int
	r    int
	arg  int
	fn   func()
}

const (
	evSample = iota // the signal scan samples demand
	evBeat
	evArrive
	evFinish
	evFunc
)

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// model runs a world under a policy.
type model struct {
	w      world
	rng    *rand.Rand
	now    time.Duration
	seq    int
	q      events
	reps   []*modelReplica
	store  map[string]demand // the demand hash, by replica id
	strict bool

	total          int
	lastT          time.Duration
	area, over110T float64
	peak           int
}

func (m *model) at(d time.Duration, kind, r, arg int, fn func()) {
	m.seq++
	heap.Push(&m.q, event{at: m.now + d, seq: m.seq, kind: kind, r: r, arg: arg, fn: fn})
}

func (m *model) serviceTime() time.Duration {
	s := float64(m.w.service)
	if m.w.sigma > 0 {
		mu := math.Log(s) - m.w.sigma*m.w.sigma/2
		s = math.Exp(mu + m.w.sigma*m.rng.NormFloat64())
	}
	return time.Duration(max(s, float64(time.Millisecond)))
}

func (m *model) thinkTime() time.Duration {
	if m.w.think <= 0 {
		return 0
	}
	return time.Duration(m.rng.ExpFloat64() * float64(m.w.think))
}

// account adds the time since the last event to the measures.
func (m *model) account() {
	from := m.lastT
	m.lastT = m.now
	t1 := m.w.start + time.Second
	if m.now <= t1 || m.now <= from {
		return
	}
	if from < t1 {
		from = t1
		m.peak = max(m.peak, m.total)
	}
	dt := (m.now - from).Seconds()
	if 10*m.total > 11*m.w.ceiling {
		m.over110T += dt
	}
	if m.now > m.w.settle {
		if from < m.w.settle {
			dt = (m.now - m.w.settle).Seconds()
		}
		m.area += dt * float64(m.total)
	}
}

// admit starts waiting requests on r while its limit allows.
func (m *model) admit(r *modelReplica) {
	if m.strict {
		m.admitStrict()
		return
	}
	for len(r.queue) > 0 && r.inflight < r.limit(m.w.ceiling) {
		m.send(r)
	}
}

func (m *model) send(r *modelReplica) {
	cl := r.queue[0]
	r.queue, r.since = r.queue[1:], r.since[1:]
	r.inflight++
	m.total++
	if m.now > m.w.start+time.Second {
		m.peak = max(m.peak, m.total)
	}
	m.at(m.serviceTime(), evFinish, r.idx, cl, nil)
}

// admitStrict: one semaphore of the ceiling for the fleet, first come
// first served wherever a request waits, each replica under its own
// controller.
func (m *model) admitStrict() {
	for m.total < m.w.ceiling {
		var best *modelReplica
		for _, r := range m.reps {
			if len(r.queue) > 0 && r.inflight < r.own(m.w.ceiling) && (best == nil || r.since[0] < best.since[0]) {
				best = r
			}
		}
		if best == nil {
			return
		}
		m.send(best)
	}
}

func (m *model) setCap(r *modelReplica, c int) {
	r.cap = c
	m.admit(r)
}

func runModel(w world, p policy) modelResult {
	m := &model{w: w, rng: rand.New(rand.NewPCG(w.seed, 0x5eed)), store: map[string]demand{}}
	_, m.strict = p.(strictPolicy)
	for i, n := range w.clients {
		r := &modelReplica{id: fmt.Sprintf("r%02d", i), idx: i, active: n, lastHeld: -time.Hour}
		if i < len(w.ctrl) {
			r.ctrl = w.ctrl[i]
		}
		m.reps = append(m.reps, r)
	}
	for _, r := range m.reps {
		p.start(m, r)
		phase := time.Duration(m.rng.Int64N(int64(w.hb)))
		if w.aligned {
			phase = w.hb/2 + time.Duration(m.rng.Int64N(int64(time.Millisecond)))
		}
		m.at(phase, evBeat, r.idx, 0, nil)
		m.at(time.Duration(m.rng.Int64N(int64(signalScan))), evSample, r.idx, 0, nil)
		for c := range r.active {
			m.at(w.start+time.Duration(m.rng.Int64N(int64(time.Second))), evArrive, r.idx, c, nil)
		}
	}
	for _, ch := range w.changes {
		m.at(ch.at, evFunc, ch.r, 0, func() {
			r := m.reps[ch.r]
			old := r.active
			r.active = ch.n
			for c := old; c < ch.n; c++ {
				m.at(m.thinkTime(), evArrive, r.idx, c, nil)
			}
		})
	}
	for m.q.Len() > 0 {
		e := heap.Pop(&m.q).(event)
		if e.at > w.duration {
			break
		}
		m.now = e.at
		m.account()
		r := m.reps[e.r]
		switch e.kind {
		case evSample:
			r.peak = max(r.peak, r.want())
			m.at(signalScan, evSample, r.idx, 0, nil)
		case evBeat:
			p.beat(m, r)
			d := w.hb
			if w.jitter > 0 {
				d += time.Duration(m.rng.Int64N(int64(w.jitter)))
			}
			m.at(d, evBeat, r.idx, 0, nil)
		case evArrive:
			if e.arg >= r.active {
				continue // the client is gone
			}
			r.queue, r.since = append(r.queue, e.arg), append(r.since, e.seq)
			m.admit(r)
		case evFinish:
			r.inflight--
			m.total--
			m.at(m.thinkTime(), evArrive, r.idx, e.arg, nil)
			m.admit(r)
		case evFunc:
			e.fn()
		}
	}
	m.now = w.duration
	m.account()
	return modelResult{mean: m.area / (w.duration - w.settle).Seconds(), peak: m.peak,
		over110: m.over110T / (w.duration - w.start - time.Second).Seconds()}
}

func (m *model) sortedDemand() []demand {
	ds := make([]demand, 0, len(m.store))
	for _, d := range m.store {
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].id < ds[j].id })
	return ds
}

func indexOf(ds []demand, id string) int {
	for i, d := range ds {
		if d.id == id {
			return i
		}
	}
	return -1
}

// sharedPolicy is the coordinator of provider.go and heartbeat.go: the
// heartbeat publishes demand (the most sampled since the last one, or one
// permit within holdFor) and reads the fleet's; the replica computes its
// share, lowers its cap at once if the share is lower, and after one
// round trip claims it (claimScript: atomic in the store, against the
// records as they are then); the answer comes one round trip later.
type sharedPolicy struct{}

func (sharedPolicy) name() string { return "shared" }

func (sharedPolicy) start(m *model, r *modelReplica) {
	r.cap = degradedCap(m.w.ceiling, len(m.reps))
	r.claim = r.cap
}

func (sharedPolicy) beat(m *model, r *modelReplica) {
	want := max(r.peak, r.want())
	r.peak = 0
	switch {
	case want > 0:
		r.lastHeld = m.now
	case m.now-r.lastHeld <= holdFor(m.w.hb):
		want = 1
	}
	rec := demand{id: r.id, inflight: r.inflight, waiting: want - r.inflight, ceiling: m.w.ceiling, cap: r.claim, own: r.own(m.w.ceiling)}
	m.store[r.id] = rec
	ds := m.sortedDemand()
	first := r.beats == 0
	r.beats++
	m.at(m.w.rtt, evFunc, r.idx, 0, func() {
		self := indexOf(ds, r.id)
		share := allocate(m.w.ceiling, ds)[self]
		if first {
			share = min(share, firstClaim(m.w.ceiling, len(m.reps), ds, self))
		}
		if slack(m.w.ceiling, ds) {
			r.lastHeld = m.now
		}
		share = max(0, share)
		held := max(0, min(r.claim, share))
		room := headroom(m.w.ceiling, ds, self)
		if lower := max(1, held); lower < r.cap {
			m.setCap(r, lower)
		}
		// claimScript, atomic in the store, with in flight as it is now.
		now := m.sortedDemand()
		g := max(0, min(share, headroom(m.w.ceiling, now, indexOf(now, r.id))))
		rec := m.store[r.id]
		want := rec.want()
		rec.inflight, rec.waiting, rec.cap = r.inflight, max(0, want-r.inflight), max(g, held)
		m.store[r.id] = rec
		m.at(m.w.rtt, evFunc, r.idx, 0, func() {
			r.claim = max(0, min(g, share, room))
			m.setCap(r, max(1, r.claim))
		})
	})
}

// strictPolicy is strict mode: what the fleet could have in flight.
type strictPolicy struct{}

func (strictPolicy) name() string                { return "strict" }
func (strictPolicy) start(*model, *modelReplica) {}
func (strictPolicy) beat(*model, *modelReplica)  {}

// issue25Policy is the shared mode before issue 25, kept to show that the
// model sees what the issue reported: the heartbeat published the cap
// set at the previous heartbeat (so a replica's cap could rise before the
// others saw it), shares went by demand above a floor kept for idle
// replicas, and the cap counted max(share, in flight, cap) for every
// other replica.
type issue25Policy struct{}

func (issue25Policy) name() string { return "before issue 25" }

func (issue25Policy) start(m *model, r *modelReplica) {
	r.cap = degradedCap(m.w.ceiling, len(m.reps))
}

func (issue25Policy) beat(m *model, r *modelReplica) {
	m.store[r.id] = demand{id: r.id, inflight: r.inflight, waiting: len(r.queue), ceiling: m.w.ceiling, cap: r.cap, own: -1}
	ds := m.sortedDemand()
	m.at(m.w.rtt, evFunc, r.idx, 0, func() {
		self := indexOf(ds, r.id)
		m.setCap(r, capOfBefore25(m.w.ceiling, ds, allocateBefore25(m.w.ceiling, ds), self))
	})
}

// allocateBefore25 and capOfBefore25 are allocate and capOf as they were.

func allocateBefore25(ceiling int, ds []demand) []int {
	n := len(ds)
	out := make([]int, n)
	if n == 0 {
		return out
	}
	fl := max(1, ceiling/(10*n))
	rest := ceiling - n*fl
	if rest < 0 {
		rest = 0 // more replicas than permits: everybody keeps one
	}
	extra := make([]int, n)
	total := 0
	for i, d := range ds {
		extra[i] = max(0, d.want()-fl)
		total += extra[i]
	}
	frac := make([]int64, n) // remainder numerators for largest-remainder rounding
	given := 0
	for i := range ds {
		if total <= rest {
			out[i] = fl + extra[i]
			given += extra[i]
			continue
		}
		num := int64(rest) * int64(extra[i])
		q := int(num / int64(total))
		out[i] = fl + q
		frac[i] = num % int64(total)
		given += q
	}
	left := rest - given
	if total <= rest {
		// Slack: split evenly, remainder by id order.
		for i := range out {
			out[i] += left / n
		}
		for i := 0; i < left%n; i++ {
			out[i]++
		}
		return out
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return frac[order[a]] > frac[order[b]] })
	for i := 0; i < left; i++ {
		out[order[i%n]]++
	}
	return out
}

func capOfBefore25(ceiling int, ds []demand, shares []int, self int) int {
	others := 0
	for i, d := range ds {
		if i != self {
			others += max(shares[i], d.inflight, d.cap)
		}
	}
	return max(1, min(shares[self], ceiling-others))
}
