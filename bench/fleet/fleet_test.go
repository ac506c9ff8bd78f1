package fleet

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

// sluiceBin is the sluice binary (testutil.Binary) for a process-level
// test that also needs redis-server.
func sluiceBin(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found: CI must install it (make test does, with apt-get)")
		}
		t.Skip("redis-server not found; `make test` installs Debian's package, or apt-get install redis-server")
	}
	testutil.Process(t)
	return testutil.Binary(t, "sluice")
}

func TestMain(m *testing.M) { os.Exit(testutil.M(m).Run()) }

// Strict mode, three real sluice processes, ceiling 30, twice as many
// streaming clients as the ceiling (the demo runs 300; the test keeps the
// machine free for the other packages' tests that run beside it): the
// provider never has more than 30 in flight; one replica
// killed with SIGKILL: its permits come back within the lease TTL and the
// others use them; no request on the surviving replicas fails.
func TestStrictFleetSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: three sluice processes for about 15 s")
	}
	var out strings.Builder
	cfg := Config{
		Sluice: sluiceBin(t), Mode: "strict", Algorithm: "fixed", Ceiling: 30, Initial: 30,
		Clients: []int{20, 20, 20}, Duration: 14 * time.Second, Heartbeat: 250 * time.Millisecond, LeaseTTL: 3 * time.Second,
		KillAt: 6 * time.Second, Out: &out,
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("\n%s%s", out.String(), Summary(cfg, res))
	if res.PeakProvider > 30 {
		t.Errorf("the provider had %d in flight, over the ceiling 30", res.PeakProvider)
	}
	if res.RecoveredAfterKill == 0 || res.RecoveredAfterKill > cfg.LeaseTTL+500*time.Millisecond {
		t.Errorf("the killed replica's permits came back after %s, want within the lease TTL %s (plus sampling)", res.RecoveredAfterKill, cfg.LeaseTTL)
	}
	for i := range 2 {
		if res.Failed[i] > 0 || res.Rejected[i] > 0 || res.OK[i] == 0 {
			t.Errorf("surviving replica r%d: ok %d, rejected %d, failed %d", i+1, res.OK[i], res.Rejected[i], res.Failed[i])
		}
	}
}

// Default mode: Redis stops under load: no request fails, each replica
// holds at most ceiling/3; Redis comes back empty: every replica is
// coordinated again within 5 s.
func TestSharedFleetRidesOutRedisOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: three sluice processes for about 12 s")
	}
	var out strings.Builder
	cfg := Config{
		Sluice: sluiceBin(t), Mode: "shared", Algorithm: "fixed", Ceiling: 30, Initial: 30,
		Clients: []int{20, 20, 20}, Duration: 12 * time.Second, Heartbeat: 250 * time.Millisecond, LeaseTTL: 3 * time.Second,
		RedisDownAt: 3 * time.Second, RedisUpAt: 7 * time.Second, Out: &out,
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("\n%s%s", out.String(), Summary(cfg, res))
	for i := range 3 {
		if res.Failed[i] > 0 || res.Rejected[i] > 0 {
			t.Errorf("r%d: %d failed, %d rejected", i+1, res.Failed[i], res.Rejected[i])
		}
		if res.MaxInflightDegraded[i] > 10 || res.CapDegraded[i] != 10 {
			t.Errorf("r%d while Redis was down: %d in flight, cap %d; want at most ceiling/3 = 10", i+1, res.MaxInflightDegraded[i], res.CapDegraded[i])
		}
	}
	if res.ResumedAfter == 0 || res.ResumedAfter > 5*time.Second {
		t.Errorf("coordination resumed after %s, want within 5 s", res.ResumedAfter)
	}
}

// A fleet-wide rate.rpm through three real sluice processes with uneven
// load: the provider receives at most the bucket plus its refill over the
// run (600 rpm counted over 1 s: 10 at once, 10 a second), most of it, and
// no request fails.
func TestFleetHoldsRPM(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: three sluice processes for about 10 s")
	}
	var out strings.Builder
	cfg := Config{
		Sluice: sluiceBin(t), Mode: "shared", Algorithm: "fixed", Ceiling: 60, Initial: 60,
		Clients: []int{20, 5, 5}, Duration: 8 * time.Second, Heartbeat: 250 * time.Millisecond, LeaseTTL: 3 * time.Second,
		RPM: 600, RequestWindow: time.Second, Out: &out,
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("\n%s%s", out.String(), Summary(cfg, res))
	t.Logf("provider: %+v", res.Sim)
	bound := RPMBound(cfg, res.Elapsed)
	if int(res.ProviderRequests) > bound {
		t.Errorf("the provider received %d requests in %s, more than rate.rpm allows fleet-wide (%d)", res.ProviderRequests, res.Elapsed, bound)
	}
	if int(res.ProviderRequests) < bound*7/10 {
		t.Errorf("the provider received %d requests of %d allowed: the fleet strands its rate", res.ProviderRequests, bound)
	}
	for i := range 3 {
		if res.Failed[i] > 0 || res.OK[i] == 0 {
			t.Errorf("r%d: ok %d, failed %d", i+1, res.OK[i], res.Failed[i])
		}
	}
}
