package cluster

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func dem(wants ...int) []demand {
	ds := make([]demand, len(wants))
	for i, w := range wants {
		ds[i] = demand{id: fmt.Sprintf("r%d", i), inflight: w, ceiling: 30, own: -1}
	}
	return ds
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func TestAllocateProportionalWhenOversubscribed(t *testing.T) {
	t.Parallel()
	// 300 clients, 80% on one replica: its share is about 80% of 30.
	ds := []demand{{id: "a", inflight: 24, waiting: 216, own: 30}, {id: "b", inflight: 3, waiting: 27, own: 30}, {id: "c", inflight: 3, waiting: 27, own: 30}}
	got := allocate(30, ds)
	if sum(got) != 30 {
		t.Fatalf("shares %v add up to %d, want 30", got, sum(got))
	}
	if got[0] < 23 || got[0] > 25 {
		t.Errorf("busy replica's share %d of 30, want about 24 (80%%): %v", got[0], got)
	}
	if d := got[1] - got[2]; d < -1 || d > 1 {
		t.Errorf("equal demand, shares differ by more than the rounding: %v", got)
	}
}

// Issue 25, case 4: 40/10/10 clients on a ceiling of 30 is 20/5/5, every
// permit where requests wait.
func TestAllocateUnevenSplitUsesTheWholeCeiling(t *testing.T) {
	t.Parallel()
	ds := []demand{{id: "a", inflight: 20, waiting: 20, own: 30}, {id: "b", inflight: 5, waiting: 5, own: 30}, {id: "c", inflight: 5, waiting: 5, own: 30}}
	if got := allocate(30, ds); got[0] != 20 || got[1] != 5 || got[2] != 5 {
		t.Errorf("shares %v, want [20 5 5]", got)
	}
}

// One replica holds all the demand: it gets the whole ceiling. Idle
// replicas keep nothing; the limiter's minimum of one permit is theirs
// anyway, and a replica that had demand lately asks for one (holdFor).
func TestAllocateIdleReplicaGetsNothingWhenFull(t *testing.T) {
	t.Parallel()
	for _, ceiling := range []int{5, 30, 2000} {
		got := allocate(ceiling, dem(3*ceiling, 0, 0))
		if got[0] != ceiling || got[1] != 0 || got[2] != 0 {
			t.Errorf("ceiling %d: shares %v, want all of it to the busy replica", ceiling, got)
		}
	}
}

// A replica whose own controller holds it below its share gets what it
// can use; the rest goes to the others, in proportion to what they ask.
// Half the fleet's requests wait on a, which would get 15 of 30, but its
// controller lets it use 10: b and c get 10 each, not 7 or 8.
func TestAllocateControllerBelowShare(t *testing.T) {
	t.Parallel()
	ds := []demand{{id: "a", inflight: 10, waiting: 30, own: 10}, {id: "b", inflight: 5, waiting: 15, own: 30}, {id: "c", inflight: 5, waiting: 15, own: 30}}
	got := allocate(30, ds)
	if got[0] != 10 || got[1] != 10 || got[2] != 10 {
		t.Errorf("shares %v, want [10 10 10]: a can use 10, b and c split the rest", got)
	}
	ds[0].own = 30
	if got := allocate(30, ds); got[0] != 15 {
		t.Errorf("shares %v with a's controller out of the way, want 15 for a (half the demand)", got)
	}
}

func TestAllocateSlackSplitEvenly(t *testing.T) {
	t.Parallel()
	got := allocate(30, dem(5, 0, 1))
	if sum(got) != 30 {
		t.Fatalf("shares %v add up to %d, want 30", got, sum(got))
	}
	// Each gets its demand, then an even part of the slack.
	if got[0] < 5+8 || got[1] < 8 || got[2] < 1+8 {
		t.Errorf("shares %v: want demand plus an even part of the slack", got)
	}
}

func TestAllocateMoreReplicasThanCeiling(t *testing.T) {
	t.Parallel()
	got := allocate(2, dem(9, 9, 9))
	if sum(got) != 2 {
		t.Errorf("shares %v add up to %d, want 2", got, sum(got))
	}
}

func TestAllocateIsDeterministic(t *testing.T) {
	t.Parallel()
	ds := dem(7, 7, 7, 7)
	a, b := allocate(30, ds), allocate(30, ds)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("two runs differ: %v vs %v", a, b)
		}
	}
	if sum(a) != 30 {
		t.Fatalf("shares %v add up to %d", a, sum(a))
	}
}

// Randomized splits and ceilings (5 to 2000, 1 to 10 replicas, idle and
// controller-limited replicas among them): the shares add up to the
// ceiling; when the fleet could use at least the ceiling, every permit
// goes to a replica that can use it (the fleet's usable total is the
// whole ceiling), none gets more than it can use, and each replica gets
// at least its part of the ceiling in proportion to its demand (or all
// it can use); otherwise each gets all it can use.
func TestAllocateProperties(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(25, 4))
	ceilings := []int{5, 10, 30, 50, 300, 2000}
	for run := range 20000 {
		ceiling := ceilings[rng.IntN(len(ceilings))]
		n := 1 + rng.IntN(10)
		ds := make([]demand, n)
		for i := range ds {
			d := demand{id: fmt.Sprintf("r%02d", i), ceiling: ceiling, own: -1}
			switch rng.IntN(5) {
			case 0: // idle
			case 1: // a little
				d.inflight = rng.IntN(3)
				d.waiting = rng.IntN(3)
			default:
				d.inflight = rng.IntN(ceiling + 1)
				d.waiting = rng.IntN(3 * ceiling)
			}
			if rng.IntN(4) == 0 {
				d.own = rng.IntN(ceiling + 1)
			} else if rng.IntN(2) == 0 {
				d.own = ceiling
			}
			ds[i] = d
		}
		got := allocate(ceiling, ds)
		fail := func(format string, a ...any) {
			t.Fatalf("run %d, ceiling %d, demand %+v, shares %v: %s", run, ceiling, ds, got, fmt.Sprintf(format, a...))
		}
		if sum(got) != ceiling {
			fail("add up to %d", sum(got))
		}
		usable, used, busy := 0, 0, 0
		for i, d := range ds {
			usable += d.usable()
			used += min(got[i], d.usable())
			if d.usable() > 0 {
				busy++
			}
		}
		if usable < ceiling {
			for i, d := range ds {
				if got[i] < d.usable() {
					fail("replica %d gets %d of the %d it could use, with room to spare", i, got[i], d.usable())
				}
			}
			continue
		}
		if used != ceiling {
			fail("the fleet could use %d of them, want all %d", used, ceiling)
		}
		if busy > ceiling {
			continue
		}
		// Its part in proportion to demand beyond the first permit each,
		// rounded down, is a lower bound: replicas that cannot use
		// theirs leave more for the others.
		extra := 0
		for _, d := range ds {
			if d.usable() > 0 {
				extra += d.want() - 1
			}
		}
		for i, d := range ds {
			if d.usable() == 0 {
				continue
			}
			fair := 1
			if extra > 0 {
				fair += (ceiling - busy) * (d.want() - 1) / extra
			}
			if got[i] < min(d.usable(), fair) {
				fail("replica %d gets %d, less than min(usable %d, its part %d)", i, got[i], d.usable(), fair)
			}
		}
	}
}

func TestHeadroomCountsWhatOthersMayStillUse(t *testing.T) {
	t.Parallel()
	// b's share fell to 6 but it still has 20 in flight: a may not grow
	// into its new share of 18 before b gives permits back.
	ds := []demand{{id: "a", inflight: 4, waiting: 50}, {id: "b", inflight: 20, cap: 6}, {id: "c", inflight: 6, cap: 6}}
	if got := headroom(30, ds, 0); got != 4 {
		t.Errorf("headroom %d, want 30-20-6 = 4", got)
	}
	ds[1].inflight = 6
	if got := headroom(30, ds, 0); got != 18 {
		t.Errorf("headroom %d after b shrank, want 18", got)
	}
	// b claimed 12 (it may admit up to that until it claims again).
	ds[1].cap = 12
	if got := headroom(30, ds, 0); got != 12 {
		t.Errorf("headroom %d while b may still use 12, want 30-12-6 = 12", got)
	}
}

// At its first heartbeat a replica leaves the starting cap of every
// expected replica it has not seen yet.
func TestFirstClaimHoldsBackForUnseenReplicas(t *testing.T) {
	t.Parallel()
	ds := []demand{{id: "a", inflight: 0, waiting: 40}}
	if got := firstClaim(30, 3, ds, 0); got != 10 {
		t.Errorf("firstClaim = %d alone of 3 expected, want 30 - 2x10 = 10", got)
	}
	ds = append(ds, demand{id: "b", cap: 10}, demand{id: "c", cap: 10})
	if got := firstClaim(30, 3, ds, 0); got != 10 {
		t.Errorf("firstClaim = %d with both others seen at 10, want 10", got)
	}
	if got := firstClaim(30, 1, ds[:1], 0); got != 30 {
		t.Errorf("firstClaim = %d alone as expected, want 30", got)
	}
}

func TestDegradedCapNeverWholeCeilingInAFleet(t *testing.T) {
	t.Parallel()
	if got := degradedCap(30, 3); got != 10 {
		t.Errorf("degradedCap(30, 3) = %d, want 10", got)
	}
	if got := degradedCap(30, 1); got != 30 {
		t.Errorf("a replica last seen alone keeps the ceiling: got %d", got)
	}
	if got := degradedCap(2, 5); got != 1 {
		t.Errorf("degradedCap(2, 5) = %d, want 1", got)
	}
}

func TestFleetCeilingIsTheLowest(t *testing.T) {
	t.Parallel()
	ds := []demand{{ceiling: 40}, {ceiling: 30}, {ceiling: 0}}
	if got, far := fleetCeiling(50, ds); got != 30 || far != nil {
		t.Errorf("fleetCeiling = %d (far %v), want 30", got, far)
	}
	// A ceiling more than 4x away either way is not the fleet's.
	ds = []demand{{id: "low", ceiling: 12}, {id: "high", ceiling: 201}, {ceiling: 13}}
	if got, far := fleetCeiling(50, ds); got != 13 || far == nil || far.id != "low" {
		t.Errorf("fleetCeiling = %d (far %v), want 13 and low named", got, far)
	}
}
