package cluster

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// warm feeds r's controller n requests whose first token came after ttft,
// enough for its first delay windows to close.
func warm(t *testing.T, r *replica, ttft time.Duration, n int) {
	t.Helper()
	for range n {
		var p adaptive.Permit
		if err := r.lim.Acquire(time.Now(), adaptive.Flow{}, nil, &p); err != nil {
			t.Fatal(err)
		}
		p.Observe(control.Sample{Kind: control.FirstToken, TTFT: ttft})
		p.Finish(time.Now(), adaptive.Outcome{Kind: adaptive.OutcomeSuccess})
		time.Sleep(5 * time.Millisecond)
	}
}

func gradientSettings() adaptive.LimiterSettings {
	set := limiterSettings(settings.AlgorithmGradient2, settings.FleetShared, 30)
	set.Limit.Window, set.Limit.WindowSamples, set.Limit.PrefillRate, set.Limit.Initial = 100*time.Millisecond, 5, 0, 10
	return set
}

// A cold replica joining a warm fleet starts with the fleet's learned TTFT
// baseline (the median of the others'), before it measured anything; a
// replica that learned its own keeps it.
func TestColdReplicaStartsWithFleetBaseline(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := gradientSettings()
	a := newReplica(t, rs.client(t), "a", set, fs, true)
	b := newReplica(t, rs.client(t), "b", set, fs, true)
	warm(t, a, 300*time.Millisecond, 40)
	warm(t, b, 320*time.Millisecond, 40)
	ba, okA := a.lim.Baseline()
	bb, okB := b.lim.Baseline()
	if !okA || !okB {
		t.Fatalf("warm replicas have no baseline: a %v, b %v", okA, okB)
	}

	// Checked before its cluster loop starts: once running, its first
	// sync may seed it before any check could look.
	c := newReplica(t, rs.client(t), "c", set, fs, false)
	if _, ok := c.lim.Baseline(); ok {
		t.Fatal("the new replica has a baseline before it joined")
	}
	c.start(t)
	testutil.Eventually(t, "the cold replica seeded", 5*time.Second, func() bool { return c.provider().BaselineSeeded == 1 })
	got, ok := c.lim.Baseline()
	want := control.MedianBaseline([]control.Baseline{ba, bb}).TTFT // 310 ms
	if !ok || got.TTFT != want {
		t.Fatalf("cold replica's baseline %v (ok %v), want the fleet's median %s", got.TTFT, ok, want)
	}
	if st := c.lim.Stats().Controller; st.TTFTBaseline != want || st.WindowsApplied != 0 {
		t.Fatalf("controller state: baseline %s after %d windows, want %s before any", st.TTFTBaseline, st.WindowsApplied, want)
	}
	if ps := c.provider(); ps.BaselineReplicas != 2 || ps.FleetBaselineSeconds != want.Seconds() {
		t.Fatalf("status: %d replicas' baselines, fleet %.3fs; want 2, %.3fs", ps.BaselineReplicas, ps.FleetBaselineSeconds, want.Seconds())
	}
	// The warm replicas keep what they learned.
	time.Sleep(300 * time.Millisecond)
	if now, _ := a.lim.Baseline(); now.TTFT != ba.TTFT || a.provider().BaselineSeeded != 0 {
		t.Fatalf("warm replica's baseline moved to %s (seeded %d times)", now.TTFT, a.provider().BaselineSeeded)
	}

	// Its own measurements replace the seed.
	warm(t, c, 200*time.Millisecond, 80)
	if own, _ := c.lim.Baseline(); own.TTFT != 200*time.Millisecond {
		t.Fatalf("after its own windows of 200ms the seeded replica's baseline is %s", own.TTFT)
	}
}
