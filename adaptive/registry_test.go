package adaptive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

func settingsFor(algo string, ceiling int) LimiterSettings {
	s := settings.DefaultLimit()
	s.Algorithm, s.Ceiling = algo, ceiling
	s = s.Complete(func(string) bool { return false })
	return LimiterSettings{Limit: s, Queue: settings.DefaultQueue()}
}

// learn drives a limiter's loss part down by drops 3 s apart (past the
// cool-down), so its limit differs from the configured initial.
func learn(t *testing.T, clk *vtime.Clock, l *Limiter, drops int) int {
	t.Helper()
	for i := 0; i < drops; i++ {
		clk.Advance(3 * time.Second)
		p := new(Permit)
		if !l.TryAcquire(clk.Now(), Flow{}, p) {
			t.Fatal("refused")
		}
		p.Finish(clk.Now(), Outcome{Kind: OutcomeDrop, Drop: control.DropOverloaded})
	}
	return l.Stats().Limit
}

func TestRegistryReconcileKeepsLearnedState(t *testing.T) {
	t.Parallel()
	clk := vtime.NewClock()
	r := NewRegistry(clk)
	want := map[string]LimiterSettings{"a": settingsFor(settings.AlgorithmAIMD, 50), "b": settingsFor(settings.AlgorithmGradient2, 50)}
	lims, err := r.Reconcile(want)
	if err != nil {
		t.Fatal(err)
	}
	a := lims["a"]
	learned := learn(t, clk, a, 3)
	if learned >= 20 {
		t.Fatalf("limit after drops = %d, want below the initial 20", learned)
	}
	held := new(Permit)
	if !a.TryAcquire(clk.Now(), Flow{}, held) {
		t.Fatal("refused")
	}

	// Unchanged settings: same limiter, same controller, learned limit kept.
	lims2, err := r.Reconcile(want)
	if err != nil {
		t.Fatal(err)
	}
	if lims2["a"] != a || a.Stats().Limit != learned {
		t.Fatalf("unchanged reload: limiter kept %v, limit %d want %d", lims2["a"] == a, a.Stats().Limit, learned)
	}

	// Changed settings, same algorithm: same limiter (the held permit is
	// still counted), new controller starting where the old one was.
	changed := settingsFor(settings.AlgorithmAIMD, 40)
	changed.Queue.MaxWaiting = 7
	lims3, err := r.Reconcile(map[string]LimiterSettings{"a": changed})
	if err != nil {
		t.Fatal(err)
	}
	st := lims3["a"].Stats()
	if lims3["a"] != a || st.Limit != learned || st.Inflight != 1 || st.Settings.Queue.MaxWaiting != 7 || st.Ceiling != 40 {
		t.Fatalf("changed reload: kept %v, stats %+v, want limit %d inflight 1", lims3["a"] == a, st, learned)
	}
	if r.Limiter("b") != nil {
		t.Fatal("removed provider still present")
	}
	if !held.Finish(clk.Now(), Outcome{}) || a.Stats().Inflight != 0 {
		t.Fatal("permit held across reloads did not release")
	}

	// Another algorithm starts from its configured initial.
	lims4, err := r.Reconcile(map[string]LimiterSettings{"a": settingsFor(settings.AlgorithmGradient2, 40)})
	if err != nil {
		t.Fatal(err)
	}
	if got := lims4["a"].Stats().Limit; got != 20 {
		t.Fatalf("algorithm change: limit %d, want the configured initial 20", got)
	}
}

func TestRegistryReconcileAllOrNothing(t *testing.T) {
	t.Parallel()
	r := NewRegistry(nil)
	good := map[string]LimiterSettings{"a": settingsFor(settings.AlgorithmFixed, 5)}
	if _, err := r.Reconcile(good); err != nil {
		t.Fatal(err)
	}
	bad := settingsFor(settings.AlgorithmGradient2, 10)
	bad.Limit.Backoff, bad.Queue.MaxWait = 1, -time.Second
	worse := settingsFor("vegas", 0)
	_, err := r.Reconcile(map[string]LimiterSettings{"a": settingsFor(settings.AlgorithmFixed, 9), "b": bad, "c": worse})
	if err == nil {
		t.Fatal("invalid settings accepted")
	}
	var se *SettingsError
	if !errors.As(err, &se) {
		t.Fatalf("error %v is not a *SettingsError", err)
	}
	for _, want := range []string{"provider b:", "limit.backoff: must be at least 0.5", "queue.max_wait: must be between 0s and 10m", "provider c:", `limit.algorithm: must be`, "limit.ceiling: must be between 1 and 100000, got 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if l := r.Limiter("a"); l == nil || l.Stats().Ceiling != 5 || r.Limiter("b") != nil {
		t.Fatal("a rejected reconcile changed the registry")
	}
}

func TestStatsBinding(t *testing.T) {
	t.Parallel()
	r := NewRegistry(vtime.NewClock())
	low := settingsFor(settings.AlgorithmGradient2, 10) // initial min(20, 10) = 10: the ceiling binds
	mid := settingsFor(settings.AlgorithmAIMD, 50)      // initial 20 < 50: the loss part binds
	lims, err := r.Reconcile(map[string]LimiterSettings{"fixed": settingsFor(settings.AlgorithmFixed, 8), "low": low, "mid": mid})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"fixed": BindingFixed, "low": BindingCeiling, "mid": "loss"} {
		if got := lims[name].Stats().Binding; got != want {
			t.Errorf("%s: binding %q, want %q", name, got, want)
		}
	}
}
