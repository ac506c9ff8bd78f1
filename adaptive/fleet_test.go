package adaptive

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

func TestFleetCapBoundsTheLimit(t *testing.T) {
	t.Parallel()
	l := testLimiter(10, 10, time.Minute, nil)
	l.SetFleetCap(3)
	if st := l.Stats(); st.Limit != 3 || st.Binding != BindingFleet {
		t.Fatalf("limit %d binding %q under a fleet cap of 3, want 3 and %q", st.Limit, st.Binding, BindingFleet)
	}
	held := []*Permit{grant(t, l), grant(t, l), grant(t, l)}
	var p Permit
	if l.TryAcquire(time.Now(), Flow{}, &p) {
		t.Fatal("a fourth permit under a cap of 3")
	}
	// A waiter is admitted as soon as the cap rises.
	done := make(chan error, 1)
	var w Permit
	go func() { done <- l.Acquire(time.Now(), Flow{}, nil, &w) }()
	testutil.Eventually(t, "one waiter", 5*time.Second, func() bool { return l.Stats().Waiting == 1 })
	l.SetFleetCap(4)
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	// A lower cap revokes nothing: 4 stay in use.
	l.SetFleetCap(1)
	if st := l.Stats(); st.Inflight != 4 || st.Limit != 1 {
		t.Fatalf("in flight %d limit %d after lowering the cap to 1", st.Inflight, st.Limit)
	}
	l.SetFleetCap(0)
	if st := l.Stats(); st.Limit != 10 || st.Binding == BindingFleet {
		t.Fatalf("limit %d binding %q with the cap removed, want the ceiling", st.Limit, st.Binding)
	}
	l.SetFleetCap(50)
	if got := l.Stats().Limit; got != 10 {
		t.Fatalf("limit %d under a cap above the ceiling, want the ceiling", got)
	}
	w.Finish(time.Now(), Outcome{})
	for _, p := range held {
		p.Finish(time.Now(), Outcome{})
	}
}

// FleetDemand reports the permits in use, the waiters, and the most this
// limiter could hold if the fleet cap let it: its controller's limit
// clamped to the ceiling, whatever the fleet cap.
func TestFleetDemandIsWhatTheReplicaCouldUse(t *testing.T) {
	t.Parallel()
	ctrl := &stepController{}
	ctrl.lim.Store(6)
	l := testLimiter(10, 100, time.Minute, ctrl)
	l.SetFleetCap(2)
	held := []*Permit{grant(t, l), grant(t, l)}
	ws := make([]Permit, 7)
	errs := make(chan error, len(ws))
	for i := range ws {
		go func() { errs <- l.Acquire(time.Now(), Flow{}, nil, &ws[i]) }()
	}
	testutil.Eventually(t, "every waiter queued", 5*time.Second, func() bool { return l.Stats().Waiting == len(ws) })
	if in, w, own := l.FleetDemand(); in != 2 || w != 7 || own != 6 {
		t.Errorf("FleetDemand = %d, %d, %d; want 2 in flight, 7 waiting, 6 of its own (the controller's)", in, w, own)
	}
	ctrl.lim.Store(20)
	if _, _, own := l.FleetDemand(); own != 10 {
		t.Errorf("own %d with the controller above the ceiling 10, want the ceiling", own)
	}
	ctrl.lim.Store(10)
	l.SetFleetCap(0)
	for range ws {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range ws {
		ws[i].Finish(time.Now(), Outcome{})
	}
	for _, p := range held {
		p.Finish(time.Now(), Outcome{})
	}
}

// fakeLeaser hands out lease ids and records what comes back.
type fakeLeaser struct {
	next     atomic.Uint64
	gate     chan struct{} // when set, Acquire waits for it
	err      error
	mu       sync.Mutex
	released []uint64
}

func (f *fakeLeaser) Acquire(time.Time, <-chan struct{}) (uint64, error) {
	if f.gate != nil {
		<-f.gate
	}
	if f.err != nil {
		return 0, f.err
	}
	return f.next.Add(1), nil
}

func (f *fakeLeaser) Release(id uint64) {
	f.mu.Lock()
	f.released = append(f.released, id)
	f.mu.Unlock()
}

func (f *fakeLeaser) releasedIDs() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]uint64(nil), f.released...)
}

func TestLeaseIsReturnedByFinishOnce(t *testing.T) {
	t.Parallel()
	l := testLimiter(5, 0, 0, nil)
	var p Permit
	if p.Lease(nil) != ErrCanceled {
		t.Fatal("a permit never granted took a lease")
	}
	p2 := grant(t, l)
	if err := p2.Lease(nil); err != nil || p2.Leased() {
		t.Fatalf("without a leaser: err %v leased %v", err, p2.Leased())
	}
	p2.Finish(time.Now(), Outcome{})

	f := &fakeLeaser{}
	l.SetLeaser(f)
	if !l.Leasing() {
		t.Fatal("Leasing false with a leaser set")
	}
	p3 := grant(t, l)
	if err := p3.Lease(nil); err != nil || !p3.Leased() {
		t.Fatalf("lease: err %v leased %v", err, p3.Leased())
	}
	p3.Finish(time.Now(), Outcome{Kind: OutcomeSuccess})
	p3.Finish(time.Now(), Outcome{Kind: OutcomeSuccess})
	if got := f.releasedIDs(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("released %v, want lease 1 once", got)
	}
	// The permit is pooled and reused: a new grant starts without a lease.
	if !l.TryAcquire(time.Now(), Flow{}, p3) || p3.Leased() {
		t.Fatal("a reused permit still holds its old lease")
	}
	p3.Finish(time.Now(), Outcome{})
	if got := f.releasedIDs(); len(got) != 1 {
		t.Fatalf("released %v after a permit without lease ended", got)
	}
}

// Finish (a disconnect watcher, shutdown) racing with a lease still
// being acquired: the lease, when it comes, goes straight back.
func TestLeaseArrivingAfterFinishGoesBack(t *testing.T) {
	t.Parallel()
	l := testLimiter(5, 0, 0, nil)
	f := &fakeLeaser{gate: make(chan struct{})}
	l.SetLeaser(f)
	p := grant(t, l)
	done := make(chan error, 1)
	go func() { done <- p.Lease(nil) }()
	testutil.Eventually(t, "a lease pending", 5*time.Second, func() bool { return p.lease.Load() == leasePending })
	p.Finish(time.Now(), Outcome{})
	close(f.gate)
	if err := <-done; err != ErrCanceled {
		t.Fatalf("Lease after Finish: %v, want ErrCanceled", err)
	}
	if got := f.releasedIDs(); len(got) != 1 {
		t.Fatalf("released %v, want the late lease given back", got)
	}
	if st := l.Stats(); st.Inflight != 0 {
		t.Fatalf("%d in flight after Finish", st.Inflight)
	}
}

func TestLeaseTimeoutLeavesThePermitToFinish(t *testing.T) {
	t.Parallel()
	l := testLimiter(5, 0, 0, nil)
	f := &fakeLeaser{err: ErrQueueTimeout}
	l.SetLeaser(f)
	p := grant(t, l)
	if err := p.Lease(nil); err != ErrQueueTimeout {
		t.Fatalf("Lease: %v, want ErrQueueTimeout", err)
	}
	if !p.Held() || p.Leased() {
		t.Fatalf("after a lease timeout: held %v leased %v; want held, no lease", p.Held(), p.Leased())
	}
	p.Finish(time.Now(), Outcome{})
	if len(f.releasedIDs()) != 0 || l.Stats().Inflight != 0 {
		t.Fatal("a lease never granted was released, or the permit was kept")
	}
}

// A freeze from another replica stops growth until its deadline, like a
// local Retry-After, without a cut; then growth resumes.
func TestFreezeGrowthHoldsTheLimit(t *testing.T) {
	t.Parallel()
	clk := vtime.NewClock()
	set := settings.DefaultLimit()
	set.Algorithm, set.Ceiling, set.Min, set.Initial, set.Cooldown = settings.AlgorithmAIMD, 50, 1, 4, 0
	ctrl, err := control.New(set, clk)
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(LimiterSettings{Limit: set}, ctrl, clk)
	if !l.FreezeGrowth(clk.Now().Add(time.Minute)) {
		t.Fatal("the AIMD controller cannot be frozen")
	}
	fill := func() {
		ps := make([]Permit, l.Stats().Limit)
		for i := range ps {
			if !l.TryAcquire(clk.Now(), Flow{}, &ps[i]) {
				t.Fatal("refused under the limit")
			}
		}
		for i := range ps {
			ps[i].Finish(clk.Now(), Outcome{Kind: OutcomeSuccess})
		}
	}
	for range 5 {
		fill()
	}
	st := l.Stats()
	if st.Limit != 4 || st.Controller.FrozenUntil.IsZero() || st.Drops != ([control.NumDropKinds]uint64{}) {
		t.Fatalf("frozen: limit %d (want 4), frozen until %v, drops %v (want none)", st.Limit, st.Controller.FrozenUntil, st.Drops)
	}
	clk.Advance(time.Minute)
	fill()
	if got := l.Stats().Limit; got <= 4 {
		t.Fatalf("limit %d after the freeze, want growth again", got)
	}
	fixed := testLimiter(5, 0, 0, nil)
	if fixed.FreezeGrowth(time.Now().Add(time.Minute)) {
		t.Error("the fixed controller claims to freeze")
	}
}

// BenchmarkLimiterAcquireReleaseFleet measures admission with and without
// a fleet cap (default mode of a cluster) side by side: the cap is read
// when the limit changes, never on admission, so both cost the same.
func BenchmarkLimiterAcquireReleaseFleet(b *testing.B) {
	now := time.Now()
	for _, capped := range []bool{false, true} {
		name := "alone"
		if capped {
			name = "fleet_cap"
		}
		b.Run(name, func(b *testing.B) {
			l := testLimiter(1<<20, 0, 0, nil)
			if capped {
				l.SetFleetCap(1 << 19)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var p Permit
				for pb.Next() {
					if !l.TryAcquire(now, Flow{}, &p) {
						b.Fatal("rejected")
					}
					if l.Leasing() { // what proxy does before forwarding
						b.Fatal("leasing in default mode")
					}
					p.Finish(now, Outcome{})
				}
			})
		})
	}
}
