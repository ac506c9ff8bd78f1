package cluster

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// A 429 with Retry-After seen by one replica: no replica raises its limit
// until the same time.
func TestRetryAfterFreezesEveryReplica(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(200*time.Millisecond, 2*time.Second)
	set := limiterSettings(settings.AlgorithmAIMD, settings.FleetShared, 30)
	fleet := startFleet(t, rs, set, fs, "a", "b", "c")
	a, b, c := fleet[0], fleet[1], fleet[2]

	var p adaptive.Permit
	if !a.lim.TryAcquire(time.Now(), adaptive.Flow{}, &p) {
		t.Fatal("no permit")
	}
	const ra = 2 * time.Second
	p.Finish(time.Now(), adaptive.Outcome{Kind: adaptive.OutcomeDrop, Drop: control.DropRateLimit, RetryAfter: ra})
	until := a.lim.Stats().Controller.FrozenUntil
	if until.IsZero() {
		t.Fatal("a is not frozen by its own Retry-After")
	}
	for _, r := range []*replica{b, c} {
		took := testutil.Eventually(t, "replica "+r.id+" frozen", time.Second, func() bool { return !r.lim.Stats().Controller.FrozenUntil.IsZero() })
		got := r.lim.Stats().Controller.FrozenUntil
		if d := got.Sub(until); d < -100*time.Millisecond || d > 100*time.Millisecond {
			t.Errorf("replica %s frozen until %s, a until %s: want the same time", r.id, got.Format(time.StampMilli), until.Format(time.StampMilli))
		}
		t.Logf("replica %s frozen %s after a's 429", r.id, took)
	}
	// Successes at full use would grow an AIMD limit; frozen, it stays.
	start := map[string]int{}
	for _, r := range []*replica{a, b, c} {
		start[r.id] = r.lim.Stats().Controller.Limit
	}
	for time.Now().Before(until.Add(-100 * time.Millisecond)) {
		for _, r := range []*replica{a, b, c} {
			succeedAtFullUse(r.lim)
			if got := r.lim.Stats().Controller.Limit; got > start[r.id] {
				t.Fatalf("replica %s raised its limit %d -> %d %s before the freeze ends", r.id, start[r.id], got, time.Until(until))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	succeedAtFullUse(b.lim)
	if got := b.lim.Stats().Controller.Limit; got <= start["b"] {
		t.Errorf("b's limit %d did not grow after the freeze ended (was %d)", got, start["b"])
	}
}

// succeedAtFullUse fills the limit and ends every permit with success.
func succeedAtFullUse(l *adaptive.Limiter) {
	ps := make([]adaptive.Permit, l.Stats().Limit)
	n := 0
	for i := range ps {
		if !l.TryAcquire(time.Now(), adaptive.Flow{}, &ps[i]) {
			break
		}
		n++
	}
	for i := range n {
		ps[i].Finish(time.Now(), adaptive.Outcome{Kind: adaptive.OutcomeSuccess})
	}
}
