package cluster

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// Default mode: three replicas with ceiling 30 keep the fleet at or under
// 30 (plus one heartbeat's churn, logged), and share it in proportion to
// their load: the replica with 80% of the clients gets about 80% of the
// permits.
func TestSharedModeSplitsCeilingByDemand(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := limiterSettings(settings.AlgorithmFixed, settings.FleetShared, 30)
	fleet := startFleet(t, rs, set, fs, "a", "b", "c")
	a, b, c := fleet[0], fleet[1], fleet[2]

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var m fleetMeter
	clients(ctx, &wg, a, 240, 20*time.Millisecond, &m)
	clients(ctx, &wg, b, 30, 20*time.Millisecond, &m)
	clients(ctx, &wg, c, 30, 20*time.Millisecond, &m)
	time.Sleep(time.Second) // shares settle within a few heartbeats
	m.peak.Store(m.now.Load())
	var capA, capAll, samples int
	for range 40 {
		time.Sleep(50 * time.Millisecond)
		capA += a.lim.FleetCap()
		capAll += a.lim.FleetCap() + b.lim.FleetCap() + c.lim.FleetCap()
		samples++
	}
	cancel()
	wg.Wait()
	share := float64(capA) / float64(capAll)
	t.Logf("busy replica's share %.2f of the caps; fleet peak in flight %d (ceiling 30); %d requests served", share, m.peak.Load(), m.served.Load())
	if share < 0.7 || share > 0.9 {
		t.Errorf("replica with 80%% of the clients got %.0f%% of the permits, want about 80%%", 100*share)
	}
	if p := m.peak.Load(); p > 30+3 {
		t.Errorf("fleet peak in flight %d, want at most the ceiling 30 plus one heartbeat's churn", p)
	}
}

// A replica that stops cleanly leaves at once: the others take its share
// at the next heartbeat, not three heartbeats later.
func TestStoppedReplicaLeavesAtOnce(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(200*time.Millisecond, 2*time.Second)
	set := limiterSettings(settings.AlgorithmFixed, settings.FleetShared, 30)
	fleet := startFleet(t, rs, set, fs, "a", "b")
	a, b := fleet[0], fleet[1]
	// Each caps itself below what the other published until both have
	// seen the other's new cap: two heartbeats.
	testutil.Eventually(t, "idle pair at 15 each", 5*fs.Heartbeat, func() bool { return a.lim.FleetCap() == 15 && b.lim.FleetCap() == 15 })
	b.stop()
	took := testutil.Eventually(t, "a alone", 3*time.Second, func() bool { return a.provider().Replicas == 1 && a.lim.FleetCap() == 30 })
	if took > 2*fs.Heartbeat+100*time.Millisecond {
		t.Errorf("a took %s to see b leave, want within two heartbeats", took)
	}
}

// A replica that goes silent drops out after three heartbeats and its
// share returns to the others.
func TestSilentReplicaDropsOut(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := limiterSettings(settings.AlgorithmFixed, settings.FleetShared, 30)
	a := newReplica(t, rs.client(t), "a", set, fs, true)
	cb := rs.client(t)
	b := newReplica(t, cb, "b", set, fs, true)
	testutil.Eventually(t, "two replicas coordinated", 5*time.Second, coordinated(a, b))
	// b's connection dies: it can no longer beat nor leave.
	cb.Close()
	took := testutil.Eventually(t, "b dropped out", 3*time.Second, func() bool { return a.provider().Replicas == 1 })
	if took < 2*fs.Heartbeat {
		t.Errorf("b dropped out after %s, before three heartbeats of silence", took)
	}
	// Its claim follows within the heartbeat (a claim is granted once
	// Redis's clock, too, has b silent for three heartbeats).
	testutil.Eventually(t, "a's cap the whole ceiling", 2*fs.Heartbeat, func() bool { return a.lim.FleetCap() == 30 })
	if st := b.co.Status(); st.State != StateDegraded || b.lim.FleetCap() != 15 {
		t.Errorf("cut-off b: state %s cap %d, want degraded with 30/2", st.State, b.lim.FleetCap())
	}
}

// Issue 25: under a steady uneven split above the ceiling the fleet holds
// 95% of the ceiling or more, without passing 110% of it: all the demand
// on one replica (the others idle), then 40/10/10: idle replicas keep no
// floor the busy one could use.
func TestSharedModeFillsTheCeiling(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := limiterSettings(settings.AlgorithmFixed, settings.FleetShared, 30)
	fleet := startFleet(t, rs, set, fs, "a", "b", "c")
	a, b, c := fleet[0], fleet[1], fleet[2]
	for _, split := range [][3]int{{60, 0, 0}, {40, 10, 10}} {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var m fleetMeter
		start := time.Now()
		for i, r := range []*replica{a, b, c} {
			clients(ctx, &wg, r, split[i], 20*time.Millisecond, &m)
		}
		// Shares follow within a few heartbeats; idle replicas hold a
		// permit for holdFor after they had some.
		time.Sleep(time.Second)
		m.peak.Store(m.now.Load())
		time.Sleep(holdFor(fs.Heartbeat) + 5*fs.Heartbeat - time.Since(start) + time.Second)
		var sum, n int64
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			sum += m.now.Load()
			n++
		}
		cancel()
		wg.Wait()
		mean := float64(sum) / float64(n)
		t.Logf("split %v: fleet in flight %.1f on average (ceiling 30), peak %d after the first second; caps %d %d %d", split, mean, m.peak.Load(),
			a.lim.FleetCap(), b.lim.FleetCap(), c.lim.FleetCap())
		if mean < 28.5 {
			t.Errorf("split %v: the fleet held %.1f of 30 on average, want 28.5 or more", split, mean)
		}
		if p := m.peak.Load(); p > 33 {
			t.Errorf("split %v: fleet peak in flight %d, over 110%% of the ceiling 30", split, p)
		}
	}
}

// Three replicas start at once under load, with long requests: a replica
// raises its cap only through a claim the others see before they
// compute theirs, so the fleet does not pass 110% of the ceiling after
// the first second (before: a cap published a heartbeat late let two
// replicas grow into the same permits, and long requests kept the
// excess).
func TestSharedModeStartsUnderLoadWithinTheCeiling(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := limiterSettings(settings.AlgorithmFixed, settings.FleetShared, 30)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var m fleetMeter
	start := time.Now()
	for i, id := range []string{"a", "b", "c"} {
		r := newReplica(t, rs.client(t), id, set, fs, true)
		clients(ctx, &wg, r, []int{40, 10, 10}[i], time.Second, &m)
	}
	time.Sleep(time.Second - time.Since(start))
	m.peak.Store(m.now.Load())
	time.Sleep(3 * time.Second)
	cancel()
	wg.Wait()
	t.Logf("fleet peak in flight %d after the first second (ceiling 30); %d requests served", m.peak.Load(), m.served.Load())
	if p := m.peak.Load(); p > 33 {
		t.Errorf("fleet peak in flight %d after the first second, over 110%% of the ceiling 30", p)
	}
}
