package scenario

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestAtCapacityScalesTheSuite: a suite scenario at another capacity keeps
// its shape and load per slot: the provider's capacities, the oracle, the
// ceiling, the clients, Sluice's queue and the provider's rate limit grow
// by the same factor, its times do not, and the report names the flags
// that made it. The scenario itself is left as it was.
func TestAtCapacityScalesTheSuite(t *testing.T) {
	t.Parallel()
	sc := CapacityStep()
	s, err := AtCapacity(sc, 300)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "capacity-step-c300" || runFlags(&Result{Scenario: s}) != "-run capacity-step -capacity 300" {
		t.Errorf("name %q, flags %q", s.Name, runFlags(&Result{Scenario: s}))
	}
	want := []sim.Step{{Capacity: 300}, {At: 80 * sec, Capacity: 150}, {At: 160 * sec, Capacity: 300}}
	if !equalSteps(s.Sim.Schedule, want) || !equalSteps(s.oracleSteps(), want) {
		t.Errorf("schedule %v, oracle %v, want %v", s.Sim.Schedule, s.oracleSteps(), want)
	}
	if s.Ceiling != 375 || s.Load.Clients != 1500 || s.MaxWaiting != 1500 || s.Duration != sc.Duration || s.Load.Think != sc.Load.Think {
		t.Errorf("ceiling %d clients %d max_waiting %d duration %v think %v", s.Ceiling, s.Load.Clients, s.MaxWaiting, s.Duration, s.Load.Think)
	}
	if q := providerConfig(s, Variants[3], "http://127.0.0.1:1", s.Ceiling, 1).Providers[0].Queue; q.MaxWaiting != 1500 {
		t.Errorf("Sluice's queue %d, want 1500", q.MaxWaiting)
	}
	if sc.Name != "capacity-step" || sc.Sim.Schedule[0].Capacity != 40 || sc.Ceiling != 50 || sc.MaxWaiting != 0 {
		t.Errorf("the suite's scenario changed: %+v", sc)
	}

	rl, err := AtCapacity(RateLimited(), 260) // its oracle runs 26
	if err != nil {
		t.Fatal(err)
	}
	if rl.Sim.RateLimitRPS != 30 || rl.Sim.RateLimitBurst != 30 || rl.oracleSteps()[0].Capacity != 260 || rl.Sim.Schedule[0].Capacity != 400 {
		t.Errorf("rate limit %g burst %d oracle %d capacity %d", rl.Sim.RateLimitRPS, rl.Sim.RateLimitBurst, rl.oracleSteps()[0].Capacity, rl.Sim.Schedule[0].Capacity)
	}
	o, err := AtCapacity(Overload(), 400)
	if err != nil {
		t.Fatal(err)
	}
	if o.Load.Rate != 80 || o.Ceiling != 800 {
		t.Errorf("open loop at %g/s, ceiling %d, want 80/s and 800", o.Load.Rate, o.Ceiling)
	}
	if _, err := AtCapacity(ProviderQuota(sim.QuotaHeadersOpenAI), 300); err == nil || !strings.Contains(err.Error(), "quota") {
		t.Errorf("a quota scaled: %v", err)
	}
}

func equalSteps(a, b []sim.Step) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestScaleScenariosBuiltAtCapacity: the knee and no-knee scenarios are
// rebuilt at the capacity asked: the knee at C refuses beyond 2C with 2C
// clients and Sluice's queue room for all of them, the oracle at the
// knee; without a knee C clients and the oracle lets them all in. They
// are found by name but are not in the suite.
func TestScaleScenariosBuiltAtCapacity(t *testing.T) {
	t.Parallel()
	for _, c := range []int{100, 300, 1000, 2000} {
		k, _ := ByName("knee")
		s, err := AtCapacity(k, c)
		if err != nil {
			t.Fatal(err)
		}
		if s.Sim.Shape != sim.ShapeKnee || s.Sim.Schedule[0].Capacity != c || s.Sim.OverloadFactor != 2 ||
			s.Load.Clients != 2*c || s.MaxWaiting != 2*c || s.oracleSteps()[0].Capacity != c || s.Ceiling <= 2*c {
			t.Errorf("knee at %d: %+v", c, s)
		}
		if got := runFlags(&Result{Scenario: s, Apart: true}); got != "-run knee -capacity "+strconv.Itoa(c)+" -apart" {
			t.Errorf("knee at %d: flags %q", c, got)
		}
		n, _ := ByName("no-knee")
		s, err = AtCapacity(n, c)
		if err != nil {
			t.Fatal(err)
		}
		if s.Sim.Shape != sim.ShapeNoKnee || s.Sim.Schedule[0].Capacity != c || s.Load.Clients != c || s.oracleSteps()[0].Capacity != s.Ceiling || s.Ceiling < c {
			t.Errorf("no knee at %d: %+v", c, s)
		}
	}
	for _, sc := range All() {
		if sc.Name == "knee" || sc.Name == "no-knee" {
			t.Errorf("%s is in the suite", sc.Name)
		}
	}
}

// TestScaleScenariosShort runs the knee and no-knee scenarios, shortened
// and with the variants apart, end to end: the provider alone is reached
// without Sluice (no limit in its samples), the others through it, every
// variant completes requests, and the targets are checked against the
// oracle. A process-level test; it asserts nothing about who wins.
func TestScaleScenariosShort(t *testing.T) {
	testutil.Process(t)
	for _, sc := range []*Scenario{Knee(20), NoKnee(20)} {
		sc.TimeScale = 0 // the run's, so that it is short
		r, err := Run(context.Background(), sc, Options{Short: true, TimeScale: 0.1, Seed: 7, Apart: true})
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		if len(r.Variants) != 3 || !r.Apart || len(r.Samples) == 0 || len(r.Samples[0].V) != 3 {
			t.Fatalf("%s: %d variants, apart %v, %d samples", sc.Name, len(r.Variants), r.Apart, len(r.Samples))
		}
		for i, v := range r.Variants {
			if v.Summary.OK == 0 || v.Provider.Requests == 0 {
				t.Errorf("%s/%s: %d completed, provider saw %d", sc.Name, v.Variant.Name, v.Summary.OK, v.Provider.Requests)
			}
			for _, smp := range r.Samples {
				if s := smp.V[i]; (s.Limit == 0) != v.Variant.Direct {
					t.Fatalf("%s/%s: sample %+v: limit %d", sc.Name, v.Variant.Name, s, s.Limit)
				}
			}
		}
		if len(r.Checks) == 0 || !strings.Contains(r.Checks[0].Got, "provider alone") {
			t.Errorf("%s: checks %+v", sc.Name, r.Checks)
		}
		if md := render("scenario.md", newReport(r, nil)); !strings.Contains(md, "one after the other") || !strings.Contains(md, "| direct (no Sluice) |") {
			t.Errorf("%s: report:\n%s", sc.Name, md)
		}
	}
}
