package cluster

import (
	"math/rand/v2"
	"testing"
	"time"
)

// Issue 25: under a steady split of demand above the ceiling, the shared
// mode keeps the fleet at 95% of the ceiling or more, and never above
// 110% of it from a second after the load starts. Checked in virtual time
// (model_test.go) against strict mode, which is what the fleet could have
// in flight.
//
// These tests do not call t.Parallel: they are CPU-bound for seconds, and
// run beside them the package's tests against a real Redis, which keep
// wall-clock heartbeats, see stalls of a second on two cores. Sequential
// tests run before the parallel ones.

// steady returns a world with the defaults the named cases share.
func steady(ceiling int, hb time.Duration, clients ...int) world {
	w := world{seed: 1, ceiling: ceiling, hb: hb, clients: clients, service: time.Second, sigma: 0.3,
		rtt: time.Millisecond, jitter: 5 * time.Millisecond, start: 2*hb + 100*time.Millisecond}
	w.settle = w.start + time.Second + holdFor(hb) + 4*hb + 2*w.service
	w.duration = w.settle + 20*time.Second
	return w
}

// namedWorlds are the issue's case and the shapes it asks about: one
// replica holding all the demand, two equal, ten with skew, ceilings from
// 5 to 2000, heartbeats from 100 ms to 2 s, clients that think, long
// streams, a replica held below its share by its own controller, and the
// split moving from one replica to another.
func namedWorlds() map[string]world {
	ws := map[string]world{
		"issue 25 case 4: 40/10/10 on 30, heartbeat 500ms": steady(30, 500*time.Millisecond, 40, 10, 10),
		"one replica holds all the demand, ceiling 30":     steady(30, 500*time.Millisecond, 60, 0, 0),
		"one replica holds all the demand, ceiling 5":      steady(5, time.Second, 15, 0, 0),
		"one replica holds all the demand, ceiling 2000":   steady(2000, time.Second, 3000, 0, 0),
		"two equal":                        steady(30, time.Second, 30, 30),
		"ten with skew, ceiling 100":       steady(100, time.Second, 120, 30, 10, 10, 10, 5, 5, 5, 3, 2),
		"heartbeat 100ms, 200ms streams":   steady(30, 100*time.Millisecond, 40, 10, 10),
		"heartbeat 2s, clients that think": steady(30, 2*time.Second, 80, 20, 20),
		"10s streams":                      steady(30, 500*time.Millisecond, 40, 10, 10),
		"controller below its share":       steady(30, 500*time.Millisecond, 40, 10, 10),
		"split moves, 10s streams":         steady(30, 500*time.Millisecond, 40, 10, 10),
	}
	w := ws["heartbeat 100ms, 200ms streams"]
	w.service, w.think = 200*time.Millisecond, 100*time.Millisecond
	ws["heartbeat 100ms, 200ms streams"] = w
	w = ws["heartbeat 2s, clients that think"]
	w.think = time.Second
	ws["heartbeat 2s, clients that think"] = w
	w = ws["10s streams"]
	w.service, w.settle, w.duration = 10*time.Second, w.settle+20*time.Second, w.duration+40*time.Second
	ws["10s streams"] = w
	w = ws["controller below its share"]
	w.ctrl = []int{15, 0, 0}
	ws["controller below its share"] = w
	w = ws["one replica holds all the demand, ceiling 2000"]
	w.service, w.settle, w.duration = 3*time.Second, w.settle+4*time.Second, w.duration+4*time.Second
	ws["one replica holds all the demand, ceiling 2000"] = w
	w = ws["split moves, 10s streams"]
	w.service, w.settle, w.duration = 10*time.Second, w.settle+20*time.Second, w.duration+60*time.Second
	w.changes = []demandChange{{at: w.settle + 20*time.Second, r: 0, n: 10}, {at: w.settle + 20*time.Second, r: 2, n: 40}}
	ws["split moves, 10s streams"] = w
	return ws
}

// holds checks the issue's invariant for a world: in flight at 95% of what
// strict mode holds (the ceiling, unless the replicas' own controllers
// allow less) or more, and never over 110% of the ceiling.
func holds(t *testing.T, w world, p policy) (ok bool, got, want modelResult) {
	got, want = runModel(w, p), runModel(w, strictPolicy{})
	return got.mean >= want.mean-0.05*float64(w.ceiling) && got.over110 == 0, got, want
}

func TestSharedModeHoldsTheCeiling(t *testing.T) {
	for name, w := range namedWorlds() {
		t.Run(name, func(t *testing.T) {
			ok, got, want := holds(t, w, sharedPolicy{})
			if !ok {
				t.Errorf("%s\nshared: %s\nstrict: %s", w, got, want)
			}
			t.Logf("shared: %s; strict: %s; before issue 25: %s", got, want, runModel(w, issue25Policy{}))
		})
	}
}

// The model sees what the issue reported: the shared mode as it was
// under-fills or overshoots in these worlds. (Case 4 as the issue stated
// it held the ceiling in the model, as on the wire here: see
// BENCHMARKS.md.)
func TestModelSeesIssue25(t *testing.T) {
	ws := namedWorlds()
	for _, name := range []string{
		"one replica holds all the demand, ceiling 30",
		"one replica holds all the demand, ceiling 5",
		"one replica holds all the demand, ceiling 2000",
		"controller below its share",
		"split moves, 10s streams",
	} {
		w := ws[name]
		if ok, got, want := holds(t, w, issue25Policy{}); ok {
			t.Errorf("%s: the shared mode before issue 25 holds here (%s; strict %s): the model no longer shows the issue", name, got, want)
		}
	}
}

// Random steady worlds: ceilings 5 to 2000, 1 to 10 replicas, heartbeats
// 100 ms to 2 s, streams of 200 ms to 10 s, splits with idle replicas and
// skew, heartbeats in step or not, a replica held by its own controller,
// clients that think (not with ceilings under 20, where one permit is
// more than the tolerance: a replica whose few clients come and go holds
// one permit it does not always use). Every replica with demand keeps two
// or more requests busy on average, and the fleet twice the ceiling.
func TestSharedModeHoldsTheCeilingInRandomWorlds(t *testing.T) {
	n := 40
	if testing.Short() {
		n = 15
	}
	for seed := range uint64(n) {
		w := randomWorld(seed + 1)
		if ok, got, want := holds(t, w, sharedPolicy{}); !ok {
			t.Errorf("%s\nshared: %s\nstrict: %s", w, got, want)
		}
	}
}

func randomWorld(seed uint64) world {
	rng := rand.New(rand.NewPCG(seed, 25))
	pick := func(xs ...int) int { return xs[rng.IntN(len(xs))] }
	w := world{seed: seed, rtt: time.Duration(200+rng.IntN(2000)) * time.Microsecond, jitter: time.Duration(rng.IntN(10)) * time.Millisecond}
	w.ceiling = pick(5, 10, 30, 50, 100, 300, 1000, 2000)
	w.hb = time.Duration(pick(100, 250, 500, 1000, 2000)) * time.Millisecond
	n := pick(1, 2, 3, 3, 5, 10)
	w.service = time.Duration(pick(200, 1000, 3000, 10000)) * time.Millisecond
	if w.ceiling >= 1000 {
		w.service = max(w.service, 3*time.Second) // bounded work per world
	}
	w.sigma = []float64{0, 0.3, 1}[rng.IntN(3)]
	if w.ceiling >= 20 && rng.IntN(2) == 0 {
		w.think = time.Duration(rng.Int64N(int64(w.service)))
	}
	w.aligned = rng.IntN(4) == 0
	per := 1 + float64(w.think)/float64(w.service) // clients per request in flight
	total := int(per * float64(2*w.ceiling+rng.IntN(2*w.ceiling+1)))
	weights := make([]float64, n)
	for i := range weights {
		switch rng.IntN(4) {
		case 0: // idle
		case 1:
			weights[i] = 10 * rng.Float64()
		default:
			weights[i] = rng.Float64()
		}
	}
	if weights[0] == 0 {
		weights[0] = 1
	}
	// No more replicas with demand than half the ceiling: each keeps the
	// limiter's one permit whatever its share.
	busy, sum := 0, 0.0
	for i := range weights {
		if weights[i] > 0 {
			if busy++; 2*busy > w.ceiling {
				weights[i] = 0
			}
		}
		sum += weights[i]
	}
	w.clients = make([]int, n)
	for i := range weights {
		if weights[i] > 0 {
			w.clients[i] = max(int(float64(total)*weights[i]/sum), int(2*per+0.5))
		}
	}
	if rng.IntN(4) == 0 {
		w.ctrl = make([]int, n)
		w.ctrl[rng.IntN(n)] = 1 + rng.IntN(w.ceiling)
	}
	w.start = 2*w.hb + 100*time.Millisecond
	w.settle = w.start + time.Second + holdFor(w.hb) + 4*w.hb + 2*w.service
	w.duration = w.settle + 20*time.Second
	return w
}
