package cluster

import (
	"fmt"
	"testing"
)

func dem(wants ...int) []demand {
	ds := make([]demand, len(wants))
	for i, w := range wants {
		ds[i] = demand{id: fmt.Sprintf("r%d", i), inflight: w, ceiling: 30}
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
	ds := []demand{{id: "a", inflight: 24, waiting: 216}, {id: "b", inflight: 3, waiting: 27}, {id: "c", inflight: 3, waiting: 27}}
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

func TestAllocateSlackSplitEvenly(t *testing.T) {
	t.Parallel()
	got := allocate(30, dem(5, 0, 1))
	if sum(got) != 30 {
		t.Fatalf("shares %v add up to %d, want 30", got, sum(got))
	}
	// Each gets its demand (or the floor), then an even part of the slack.
	if got[0] < 5+7 || got[1] < 1+7 {
		t.Errorf("shares %v: want demand plus an even part of the slack", got)
	}
}

func TestAllocateIdleReplicaKeepsFloor(t *testing.T) {
	t.Parallel()
	got := allocate(100, dem(500, 0, 0))
	if sum(got) != 100 {
		t.Fatalf("shares %v add up to %d, want 100", got, sum(got))
	}
	if got[1] < 1 || got[2] < 1 || got[1] != floorOf(100, 3) {
		t.Errorf("idle replicas %v, want the floor %d", got, floorOf(100, 3))
	}
}

func TestAllocateMoreReplicasThanCeiling(t *testing.T) {
	t.Parallel()
	got := allocate(2, dem(9, 9, 9))
	for i, s := range got {
		if s != 1 {
			t.Errorf("replica %d share %d, want 1 (the floor)", i, s)
		}
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

func TestCapWaitsForOthersToShrink(t *testing.T) {
	t.Parallel()
	// b's share fell to 6 but it still has 20 in flight: a may not grow
	// into its new share of 18 before b gives permits back.
	ds := []demand{{id: "a", inflight: 4, waiting: 50}, {id: "b", inflight: 20}, {id: "c", inflight: 6}}
	shares := []int{18, 6, 6}
	if got := capOf(30, ds, shares, 0); got != 4 {
		t.Errorf("cap %d, want 30-20-6 = 4", got)
	}
	ds[1].inflight = 6
	if got := capOf(30, ds, shares, 0); got != 18 {
		t.Errorf("cap %d after b shrank, want its share 18", got)
	}
	// b published a cap of 12 at its last heartbeat: it may still admit
	// up to 12 until it recomputes.
	ds[1].cap = 12
	if got := capOf(30, ds, shares, 0); got != 12 {
		t.Errorf("cap %d while b may still use 12, want 30-12-6 = 12", got)
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
	if got := fleetCeiling(50, ds); got != 30 {
		t.Errorf("fleetCeiling = %d, want 30", got)
	}
}
