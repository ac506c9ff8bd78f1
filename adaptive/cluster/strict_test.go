package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// Strict mode: 3 replicas, ceiling 30, 300 clients: never more than 30
// leases, nor requests past them, at once anywhere in the fleet.
func TestStrictModeNeverExceedsCeiling(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := limiterSettings(settings.AlgorithmFixed, settings.FleetStrict, 30)
	fleet := startFleet(t, rs, set, fs, "a", "b", "c")
	a, b, c := fleet[0], fleet[1], fleet[2]

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var m fleetMeter
	clients(ctx, &wg, a, 150, 15*time.Millisecond, &m)
	clients(ctx, &wg, b, 100, 15*time.Millisecond, &m)
	clients(ctx, &wg, c, 50, 15*time.Millisecond, &m)
	var storePeak atomic.Int64
	watch := rs.client(t)
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(5 * time.Millisecond):
			}
			n, err := watch.ZCard(context.Background(), a.co.k.leases("p")).Result()
			if err == nil && n > storePeak.Load() {
				storePeak.Store(n)
			}
		}
	}()
	time.Sleep(3 * time.Second)
	cancel()
	wg.Wait()
	close(stopWatch)
	<-watched
	t.Logf("fleet peak in flight %d, leases in Redis peak %d, %d requests served", m.peak.Load(), storePeak.Load(), m.served.Load())
	if p := m.peak.Load(); p > 30 {
		t.Errorf("fleet peak in flight %d, over the ceiling 30", p)
	}
	if p := storePeak.Load(); p > 30 {
		t.Errorf("leases in Redis peaked at %d, over the ceiling 30", p)
	}
	if m.served.Load() < 1000 {
		t.Errorf("only %d requests served in 3 s: leases are not flowing", m.served.Load())
	}
	for _, r := range []*replica{a, b, c} {
		l := r.provider().Leases
		if l == nil || l.Granted == 0 {
			t.Errorf("replica %s granted no lease: %+v", r.id, l)
		}
	}
}

// A replica that dies holding leases (it never renews them again): they
// expire within the lease TTL and the others take them.
func TestDeadReplicaLeasesExpireWithinTTL(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := limiterSettings(settings.AlgorithmFixed, settings.FleetStrict, 10)
	dead := newReplica(t, rs.client(t), "dead", set, fs, false) // attached, never beats nor renews
	ld := dead.co.provs["p"].lease
	first := time.Now() // the first lease expires a TTL after this
	for i := range 10 {
		if _, err := ld.Acquire(time.Now().Add(5*time.Second), nil); err != nil {
			t.Fatalf("lease %d: %v", i, err)
		}
	}
	if n := ld.unconfirmed.Load(); n > 0 {
		t.Fatalf("%d leases were granted without Redis (a call timed out); the test needs them in Redis", n)
	}
	taken := time.Now()
	live := newReplica(t, rs.client(t), "live", set, fs, true)
	var p adaptive.Permit
	if !live.lim.TryAcquire(time.Now(), adaptive.Flow{}, &p) {
		t.Fatal("no local permit")
	}
	if err := p.Lease(nil); err != nil {
		t.Fatalf("lease: %v", err)
	}
	after, sinceFirst := time.Since(taken), time.Since(first)
	p.Finish(time.Now(), adaptive.Outcome{})
	t.Logf("the dead replica's leases came back %s after they were taken (TTL %s)", after, fs.LeaseTTL)
	if sinceFirst < fs.LeaseTTL-50*time.Millisecond {
		t.Errorf("a lease was granted %s after the first was taken, while the dead replica's 10 of 10 were still valid", sinceFirst)
	}
	if after > fs.LeaseTTL+500*time.Millisecond {
		t.Errorf("the dead replica's leases came back after %s, want within the TTL (%s)", after, fs.LeaseTTL)
	}
}

// A permit finished while it waits for a lease (the client left) gives
// the lease back when it arrives; the fleet does not leak it.
func TestLeaseArrivingAfterFinishIsReleased(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := limiterSettings(settings.AlgorithmFixed, settings.FleetStrict, 1)
	a := newReplica(t, rs.client(t), "a", set, fs, true)
	testutil.Eventually(t, "coordinated", 5*time.Second, coordinated(a))
	var p adaptive.Permit
	if !a.lim.TryAcquire(time.Now(), adaptive.Flow{}, &p) {
		t.Fatal("no local permit")
	}
	done := make(chan error, 1)
	go func() { done <- p.Lease(nil) }()
	p.Finish(time.Now(), adaptive.Outcome{})
	<-done
	ck := rs.client(t)
	testutil.Eventually(t, "lease given back", 2*time.Second, func() bool {
		n, err := ck.ZCard(context.Background(), a.co.k.leases("p")).Result()
		return err == nil && n == 0 && a.provider().Leases.Held == 0
	})
}
