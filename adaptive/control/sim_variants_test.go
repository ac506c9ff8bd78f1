package control

import (
	"testing"

	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/internal/vtime"
)

// simVariant is a shape of the suite, the capacity step (40 -> 20 -> 40,
// ceiling 50, 200 clients) unless base says otherwise, with one thing
// about the provider or its traffic changed: the ways a user's provider
// differs from the suite's shapes. wantMean and
// wantWorst are gradient2's completions against the oracle's (mean over
// the seeds, worst seed). Provider refusals: at most 1/100 of fixed at the
// ceiling's, or at most maxRefusals per run when that is set.
type simVariant struct {
	name                string
	change              func(*simScenario)
	wantMean, wantWorst float64
	maxRefusals         float64
	// base is the shape changed; nil is the capacity step.
	base func() simScenario
}

// simSuiteShape returns the suite's shape called name.
func simSuiteShape(name string) func() simScenario {
	return func() simScenario {
		for _, sc := range simScenarios() {
			if sc.name == name {
				return sc
			}
		}
		panic("no simulated shape " + name)
	}
}

// simAtScale sets a constant-capacity shape to a capacity of 120, the
// ceiling to 160 and its closed-loop clients to 600 (three times the
// suite's 40, 50 and 200), its oracle to oracle.
func simAtScale(oracle int) func(*simScenario) {
	return func(sc *simScenario) {
		sc.provider.schedule = []vtime.Step[int]{{At: 0, V: 120}}
		sc.ceiling = 160
		if sc.load.clients > 0 {
			sc.load.clients = 600
		} else {
			sc.load.maxRate *= 3
		}
		sc.oracle = []vtime.Step[int]{{At: 0, V: oracle}}
		if sc.phases != nil {
			sc.phases = []simPhaseSpec{{"all", 0, sc.duration, oracle}}
		}
	}
}

// simScaleStep sets the capacity step to hi -> hi/2 -> hi, the ceiling
// and the clients in proportion to the suite's (50 and 200 at 40).
func simScaleStep(hi int) func(*simScenario) {
	return func(sc *simScenario) {
		lo := hi / 2
		sc.provider.schedule = []vtime.Step[int]{{At: 0, V: hi}, {At: 80 * simS, V: lo}, {At: 160 * simS, V: hi}}
		sc.phases = []simPhaseSpec{{"high", 0, 80 * simS, hi}, {"low", 80 * simS, 160 * simS, lo}, {"high again", 160 * simS, 240 * simS, hi}}
		sc.ceiling = max(hi*4/3, 50)
		sc.load.clients = 5 * hi
	}
}

func simVariants() []simVariant {
	return []simVariant{
		{"long outputs (mean 1,000 tokens)", func(sc *simScenario) { sc.load.output = vtime.Lognormal{Mean: 1000, Sigma: 0.6, Max: 4000} }, 0.97, 0.95, 0, nil},
		{"short outputs (mean 40 tokens)", func(sc *simScenario) { sc.load.output = vtime.Lognormal{Mean: 40, Sigma: 0.5, Max: 200} }, 0.97, 0.95, 0, nil},
		// Long prompts spread the seeds more than the other shapes: over
		// twelve seeds the worst is 92-93% with either slow start (by
		// rounds, or per first token in the cold start), at a mean of
		// 97.7%, so the worst-seed bound of the three seeds run here is
		// where that spread lies, not the shared 95%.
		{"long prompts (mean 8,000 tokens)", func(sc *simScenario) { sc.load.prompt = vtime.Lognormal{Mean: 8000, Sigma: 0.5, Max: 32000} }, 0.97, 0.93, 0, nil},
		// Fixed at 50 with 48 clients overloads the provider only while
		// the capacity is 20, and draws about 1,300 refusals, not 13,000.
		// Gradient2's 14 are the step down's, drawn in its first second,
		// as on the suite's capacity step: a limit that learns the step
		// from the provider cannot avoid them, so they are bounded per
		// run instead of against fixed's.
		{"few clients (48, just above the capacity)", func(sc *simScenario) { sc.load.clients = 48 }, 0.97, 0.95, 20, nil},
		{"no queue in the provider (refuses at C)", func(sc *simScenario) { sc.provider.overload = 1 }, 0.97, 0.95, 0, nil},
		{"deep queue in the provider (refuses at 4 C)", func(sc *simScenario) { sc.provider.overload = 4 }, 0.97, 0.95, 0, nil},
		{"per-stream rate independent of the load", func(sc *simScenario) { sc.provider.itlRef = 1e9 }, 0.97, 0.95, 0, nil},
		{"small provider (8 -> 4 -> 8, ceiling 50)", simScaleStep(8), 0.97, 0.95, 0, nil},
		// At this scale the shared 97% rests on slow start that ends past
		// the capacity coming down to what the provider served
		// (TestDelaySlowStartEndsAtWhatTheProviderServes), a remembered
		// capacity ageing from its latest fall
		// (TestDelayRecallAgesFromLatestFall) and a capacity that came
		// back lifting the loss part (TestLossLiftedWhenCapacityRecalled).
		// What is left is mostly the cold start's ramp from initial.
		{"three times the scale (120 -> 60 -> 120, ceiling 160)", simScaleStep(120), 0.97, 0.95, 0, nil},
		// Other shapes of the suite at three times its scale. Three get
		// lower bounds than the shared targets, all for the time it takes
		// to reach a capacity of 120 from initial (20), not for where the
		// limit settles:
		//   - non-streaming: with no first token to measure, the limit
		//     doubles only after 10 answers dispatched with it in use,
		//     about 5 s per doubling while answers take 6-10 s;
		//   - slowing: the cold start's ramp from initial (20) to 160;
		//   - a request-rate limit of 9/s: the first burst is refused
		//     down to 9, and the climb to about 75 takes some 40 s, each
		//     step one first token at the limit; the climb passes levels
		//     the delay part cut from early on, and takes a +2 step at
		//     each before the sqrt(limit) ones (grow).
		// What each achieves, and what was tried to shorten the cold
		// start, is in BENCHMARKS.md ("Seventh round", "Tenth round").
		{"overload at three times the scale", simAtScale(120), 0.97, 0.95, 0, simSuiteShape("overload-2x")},
		{"noisy TTFT at three times the scale", simAtScale(120), 0.97, 0.95, 0, simSuiteShape("noisy-ttft")},
		{"non-streaming at three times the scale", simAtScale(120), 0.955, 0.95, 0, simSuiteShape("non-streaming")},
		{"slowing at three times the scale", simAtScale(120), 0.965, 0.95, 0, simSlowing},
		{"request-rate limit of 9/s at three times the scale (oracle 78)", func(sc *simScenario) {
			simAtScale(78)(sc)
			sc.provider.rateRPS, sc.provider.rateBurst = 9, 9
		}, 0.93, 0.91, 0, simSuiteShape("rate-limit")},
		{"knee at three times the scale (knee 36, refuses at 72)", func(sc *simScenario) {
			sc.provider.knee, sc.provider.refuseAt, sc.ceiling, sc.load.clients = 36, 72, 150, 600
			sc.oracle, sc.phases = []vtime.Step[int]{{At: 0, V: 36}}, []simPhaseSpec{{"all", 0, sc.duration, 36}}
		}, 0.97, 0.95, 0, simKnee},
		{"knee of 5 (refuses at 10)", func(sc *simScenario) {
			sc.provider.knee, sc.provider.refuseAt = 5, 10
			sc.oracle, sc.phases = []vtime.Step[int]{{At: 0, V: 5}}, []simPhaseSpec{{"all", 0, sc.duration, 5}}
		}, 0.97, 0.95, 0, simKnee},
	}
}

// TestSimVariants runs each variant and checks gradient2 against the
// oracle (completions) and fixed at the ceiling (provider refusals: at
// most 1/100 of its own, wherever it draws any). Held-out shapes: nothing
// in the controller was tuned on them before they were written; their
// results are in BENCHMARKS.md ("Seventh round").
func TestSimVariants(t *testing.T) {
	testutil.Simulation(t)
	t.Parallel()
	for _, v := range simVariants() {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			base := v.base
			if base == nil {
				base = simCapacityStep
			}
			sc := base()
			sc.name = sc.name + ", " + v.name
			v.change(&sc)
			o := simRunScenario(t, sc)
			mean, worst := o.g2.vs(o.oracle)
			if mean < v.wantMean || worst < v.wantWorst {
				t.Errorf("gradient2 completed %.1f%% of the oracle (worst seed %.1f%%), want >= %.0f%% (no seed < %.0f%%)",
					100*mean, 100*worst, 100*v.wantMean, 100*v.wantWorst)
			}
			if v.maxRefusals > 0 {
				if o.g2.refusals > v.maxRefusals {
					t.Errorf("gradient2 drew %.0f provider refusals per run, want at most %.0f", o.g2.refusals, v.maxRefusals)
				}
			} else if o.fixed.refusals > 0 && o.g2.refusals*100 > o.fixed.refusals {
				t.Errorf("gradient2 drew %.0f provider refusals per run, want at most 1/100 of fixed@%d's %.0f",
					o.g2.refusals, o.sc.ceiling, o.fixed.refusals)
			}
		})
	}
}
