package cluster

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// Redis stops under load: no request fails because of it, each replica
// falls back to ceiling / 3 (never the whole ceiling), the state says
// degraded; Redis comes back empty: coordination resumes by itself within
// a few heartbeats and the fleet state is rebuilt from them.
func TestRedisOutageFallsBackAndResumes(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(200*time.Millisecond, 2*time.Second)
	for _, mode := range []string{settings.FleetShared, settings.FleetStrict} {
		set := limiterSettings(settings.AlgorithmFixed, mode, 30)
		set.Limit.Fleet = mode
		rs2 := rs
		if mode == settings.FleetStrict {
			rs2 = startRedis(t)
		}
		t.Run(mode, func(t *testing.T) {
			outage(t, rs2, fs, set)
		})
	}
}

func outage(t *testing.T, rs *redisServer, fs settings.Fleet, set adaptive.LimiterSettings) {
	fleet := startFleet(t, rs, set, fs, "a", "b", "c")
	a, b, c := fleet[0], fleet[1], fleet[2]
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var m fleetMeter
	var failed sync.Map
	for _, r := range []*replica{a, b, c} {
		clients(ctx, &wg, r, 40, 10*time.Millisecond, &m)
	}
	time.Sleep(500 * time.Millisecond)

	rs.stop()
	testutil.Eventually(t, "every replica degraded", 3*time.Second, func() bool {
		for _, r := range []*replica{a, b, c} {
			if r.co.Status().State != StateDegraded {
				return false
			}
		}
		return true
	})
	served := m.served.Load()
	time.Sleep(time.Second)
	for _, r := range []*replica{a, b, c} {
		if got := r.lim.FleetCap(); got != 10 {
			t.Errorf("replica %s degraded cap %d, want ceiling/3 = 10", r.id, got)
		}
		if l := r.provider().Leases; l != nil && l.Timeouts > 0 {
			failed.Store(r.id, l.Timeouts)
		}
	}
	if m.served.Load() == served {
		t.Error("no request was served while Redis was down")
	}
	m.peak.Store(m.now.Load())

	down := time.Now()
	rs.restart()
	up := time.Since(down)
	took := testutil.Eventually(t, "coordination resumed", 5*time.Second, coordinated(a, b, c))
	t.Logf("coordination resumed %s after Redis answered again (its start took %s)", took, up)
	time.Sleep(time.Second)
	cancel()
	wg.Wait()
	failed.Range(func(k, v any) bool { t.Errorf("replica %v: %v lease requests timed out", k, v); return true })
	// Every replica comes to see the same, idle fleet within a few
	// heartbeats (more on a loaded machine): the shares add up again.
	shares := func() int {
		sum := 0
		for _, r := range []*replica{a, b, c} {
			sum += r.provider().Share
		}
		return sum
	}
	testutil.Eventually(t, "shares add up to the ceiling after the restart", 10*time.Second, func() bool { return shares() == 30 })
	sum, lost := shares(), uint64(0)
	for _, r := range []*replica{a, b, c} {
		lost += r.co.Status().StateLost
	}
	// The first heartbeat on the empty Redis finds the state lost and
	// opens the rebuild window; the others just re-publish theirs.
	if lost < 2 { // once at the fleet's first start, once after the restart
		t.Errorf("state lost noticed %d times, want the first start and the restart", lost)
	}
	if sum != 30 {
		t.Errorf("shares add up to %d after the restart, want 30", sum)
	}
}

// A replica that starts while Redis is down serves, capped at ceiling /
// expected_replicas, and joins the fleet when Redis appears.
func TestStartsDegradedWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	fs := fleetSettings(100*time.Millisecond, time.Second)
	fs.ExpectedReplicas = 3
	cl := newTestClient("127.0.0.1:" + strconv.Itoa(port))
	t.Cleanup(func() { cl.Close() })
	a := newReplica(t, cl, "a", limiterSettings(settings.AlgorithmFixed, settings.FleetStrict, 30), fs, true)
	testutil.Eventually(t, "degraded", 3*time.Second, func() bool { return a.co.Status().State == StateDegraded })
	if got := a.lim.FleetCap(); got != 10 {
		t.Errorf("cap %d with Redis down at start, want ceiling / expected_replicas = 10", got)
	}
	var p adaptive.Permit
	if !a.lim.TryAcquire(time.Now(), adaptive.Flow{}, &p) {
		t.Fatal("no permit while degraded")
	}
	if err := p.Lease(nil); err != nil {
		t.Fatalf("strict lease while degraded: %v; want an unconfirmed grant", err)
	}
	p.Finish(time.Now(), adaptive.Outcome{})

	rs := &redisServer{t: t, port: port}
	rs.restart()
	t.Cleanup(rs.stop)
	testutil.Eventually(t, "coordinated once Redis is up", 5*time.Second, coordinated(a))
	// Its first heartbeat holds back the starting caps of the expected
	// replicas it has not seen yet (they may have started with it); from
	// the second on, alone, it has the whole ceiling.
	testutil.Eventually(t, "the whole ceiling alone", 3*fs.Heartbeat, func() bool { return a.lim.FleetCap() == 30 })
}
