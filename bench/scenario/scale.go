package scenario

import (
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/settings"
)

// Scale scenarios: a provider whose knee is at a capacity from a
// self-hosted engine's to a hosted model's batch tier, and one without a
// knee. They are run by name (`-run knee -capacity 300`), not by the
// suite: at hundreds of streams a run measures the machine as much as
// the limiter, and the suite's reports stay those of its own scenarios.

// Scale returns the scale scenarios at their default capacities.
func Scale() []*Scenario {
	return []*Scenario{Knee(100), NoKnee(1000)}
}

// Direct is the load sent straight to the provider, without Sluice: what
// the provider alone serves, and how fast.
var Direct = Variant{Name: "direct", Label: "direct (no Sluice)", Algorithm: settings.AlgorithmFixed, Direct: true, Color: "#7f7f7f"}

// scaleVariants are what the scale scenarios compare: the provider alone,
// a fixed limit at what the provider serves best (the oracle) and
// gradient2.
func scaleVariants() []Variant {
	o, _ := VariantByName("oracle")
	g, _ := VariantByName("gradient2")
	return []Variant{Direct, o, g}
}

// shortStreams is the scale scenarios' traffic: streams of about a second
// (a short prompt's first token and some 40 output tokens), sent again
// after a short pause, so that twice the capacity in clients keeps the
// provider saturated.
func shortStreams(clients int) Load {
	return Load{Clients: clients, Think: 100 * time.Millisecond, Prompt: stdPrompt,
		Output: load.Dist{Mean: 40, Sigma: 0.5, Max: 200}}
}

// scaleCeiling is the ceiling a new user would set in front of a provider
// of capacity c: far above it.
func scaleCeiling(c int) int {
	switch {
	case c <= 10:
		return 50
	case c <= 300:
		return 2000
	}
	return 5000
}

// Knee is a provider whose knee is at c streams: every request runs at
// once, beyond c more streams buy only latency (time to first token and
// inter-token latency grow in proportion), and beyond 2c it refuses. 2c
// closed-loop clients of short streams keep it past the knee; the oracle
// runs c.
func Knee(c int) *Scenario {
	c = max(c, 1)
	d := 60 * sec
	return &Scenario{
		Name:  "knee",
		Title: fmt.Sprintf("Knee at %d, refusals beyond %d, %d clients", c, 2*c, 2*c),
		About: fmt.Sprintf("The provider runs every request at once; up to %d streams it answers at its unloaded speed, beyond that its "+
			"time to first token and inter-token latency grow in proportion to the load (twice as slow at %d), and at %d it refuses "+
			"with 429 and retry-after. Completions per second are flat beyond the knee: more concurrency buys only latency. "+
			"%d closed-loop clients send streams of about a second (some 40 tokens) after a 100 ms pause, from cold. "+
			"gradient2 (ceiling %d, far above the knee) against fixed at the knee (the oracle) and the provider alone. "+
			"Sluice's queue has room for every client. Runs in real time.", c, 2*c, 2*c, 2*c, scaleCeiling(c)),
		Duration:   d,
		TimeScale:  1,
		Capacity:   c,
		AtCapacity: Knee,
		Sim:        sim.Config{Shape: sim.ShapeKnee, Schedule: []sim.Step{{Capacity: c}}, OverloadFactor: 2},
		Load:       shortStreams(2 * c),
		Ceiling:    scaleCeiling(c),
		MaxWaiting: 2 * c,
		OracleNote: fmt.Sprintf("%d, the knee: beyond it the provider completes no more", c),
		Oracle:     []sim.Step{{Capacity: c}},
		Phases:     []Phase{{"all", 0, d}},
		Variants:   scaleVariants(),
		Targets:    kneeTargets,
	}
}

// NoKnee is a provider with room for everything: every stream runs, never
// refused for load, and time to first token and inter-token latency rise
// by half at c streams, gently, as a host's processor fills; completions
// keep rising with concurrency. c closed-loop clients of short streams;
// the oracle is fixed at the ceiling, which lets all of them in.
func NoKnee(c int) *Scenario {
	c = max(c, 1)
	d := 60 * sec
	ceiling := max(5000, 2*c)
	return &Scenario{
		Name:  "no-knee",
		Title: fmt.Sprintf("No knee, %d streams", c),
		About: fmt.Sprintf("The provider runs every request at once and never refuses for load; its time to first token and "+
			"inter-token latency rise by half at %d streams, in proportion to the load, so completions per second keep rising with "+
			"concurrency. %d closed-loop clients send streams of about a second (some 40 tokens) after a 100 ms pause, from cold. "+
			"A limit below the clients costs them latency in Sluice's queue that the provider would not have. gradient2 "+
			"(ceiling %d) against fixed at the ceiling (the oracle: everyone in) and the provider alone. Runs in real time.", c, c, ceiling),
		Duration:   d,
		TimeScale:  1,
		Capacity:   c,
		AtCapacity: NoKnee,
		Sim:        sim.Config{Shape: sim.ShapeNoKnee, Schedule: []sim.Step{{Capacity: c}}},
		Load:       shortStreams(c),
		Ceiling:    ceiling,
		MaxWaiting: c,
		OracleNote: fmt.Sprintf("%d, the ceiling: the provider completes more the more it runs", ceiling),
		Oracle:     []sim.Step{{Capacity: ceiling}},
		Phases:     []Phase{{"all", 0, d}},
		Variants:   scaleVariants(),
		Targets:    noKneeTargets,
	}
}

// kneeTargets checks the targets at the knee: gradient2 completes
// at least 97% of the oracle's requests per second, with clients' time to
// first token p99 (Sluice's queue included) at most 1.5 times the
// oracle's.
func kneeTargets(r *Result) []Check { return againstOracle(r, 0.97, 1.5) }

// noKneeTargets checks the target without a knee: gradient2
// completes at least 95% of fixed's requests per second.
func noKneeTargets(r *Result) []Check { return againstOracle(r, 0.95, 0) }

// againstOracle compares gradient2 with the oracle: completions per
// second at least share of the oracle's and, when ttft > 0, clients' time
// to first token p99 (Sluice's queue included) at most ttft times the
// oracle's. The provider alone is reported beside them.
func againstOracle(r *Result, share, ttft float64) []Check {
	or, g := r.Variant("oracle"), r.Variant("gradient2")
	if or == nil || g == nil || or.Summary.OKPerSecond == 0 {
		return nil
	}
	ratio := func(v *VariantResult) (rate, p99 float64) {
		rate, p99 = v.Summary.OKPerSecond/or.Summary.OKPerSecond, math.Inf(1)
		if or.TTFT.P99 > 0 {
			p99 = float64(v.TTFT.P99) / float64(or.TTFT.P99)
		}
		return rate, p99
	}
	rate, p99 := ratio(g)
	direct := ""
	if d := r.Variant("direct"); d != nil {
		dr, dp := ratio(d)
		direct = fmt.Sprintf("; the provider alone %.1f/s (%.1f%%), TTFT p99 %s (%.2fx)", d.Summary.OKPerSecond, 100*dr, fmtDur(d.TTFT.P99), dp)
	}
	checks := []Check{{
		Target: fmt.Sprintf("gradient2: completions/s at least %.0f%% of the oracle's", 100*share),
		Got: fmt.Sprintf("%.1f vs %.1f/s (%.1f%%), %d upstream refusals%s",
			g.Summary.OKPerSecond, or.Summary.OKPerSecond, 100*rate, g.UpstreamRejected, direct),
		Met: rate >= share,
	}}
	if ttft > 0 {
		checks = append(checks, Check{
			Target: fmt.Sprintf("gradient2: client TTFT p99 at most %gx the oracle's", ttft),
			Got:    fmt.Sprintf("%s vs %s (%.2fx)", fmtDur(g.TTFT.P99), fmtDur(or.TTFT.P99), p99),
			Met:    p99 <= ttft,
		})
	}
	return checks
}

// AtCapacity returns sc at capacity c: the scale scenarios are rebuilt
// for c, and the suite's scenarios are scaled by c over the concurrency
// their oracle first runs (40 for most): the provider's capacities, the
// oracle, the ceiling, the clients or the arrival rate, the provider's
// rate limit and Sluice's queue, so that the provider is as loaded as
// at the scenario's own size. The name says the capacity. A scenario
// whose limits are not a capacity (an account's quota) does not scale.
func AtCapacity(sc *Scenario, c int) (*Scenario, error) {
	if c <= 0 {
		return nil, fmt.Errorf("scenario: capacity %d: want > 0", c)
	}
	name := fmt.Sprintf("%s-c%d", sc.Name, c)
	if sc.AtCapacity != nil {
		s := sc.AtCapacity(c)
		s.Name, s.scaledFrom = name, sc.Name
		return s, nil
	}
	if sc.NoCapacity != "" {
		return nil, fmt.Errorf("scenario %s does not scale: %s", sc.Name, sc.NoCapacity)
	}
	ref := sc.oracleSteps()[0].Capacity
	k := float64(c) / float64(ref)
	// An outage stays one; any other capacity keeps at least one slot.
	n := func(v int) int {
		if v == 0 {
			return 0
		}
		return max(int(math.Round(float64(v)*k)), 1)
	}
	s := *sc
	s.Name, s.scaledFrom = name, sc.Name
	s.Title = fmt.Sprintf("%s, at %gx (capacity %d)", sc.Title, k, c)
	s.Capacity = c
	s.Sim.Schedule = scaleSteps(sc.Sim.Schedule, n)
	s.Oracle = scaleSteps(sc.Oracle, n)
	s.Ceiling = n(sc.Ceiling)
	s.MaxWaiting = n(orDefault(sc.MaxWaiting, settings.DefaultQueue().MaxWaiting))
	if sc.Load.Clients > 0 {
		s.Load.Clients = n(sc.Load.Clients)
	}
	s.Load.Rate *= k
	s.Load.MaxRate *= k
	if f := sc.Load.RateAt; f != nil {
		s.Load.RateAt = func(t time.Duration) float64 { return f(t) * k }
	}
	s.Sim.RateLimitRPS *= k
	if sc.Sim.RateLimitBurst > 0 {
		s.Sim.RateLimitBurst = n(sc.Sim.RateLimitBurst)
	}
	if sc.OracleNote != "" {
		s.OracleNote = fmt.Sprintf("%d, the scenario's own oracle (%s) at %gx", s.oracleSteps()[0].Capacity, sc.OracleNote, k)
	}
	return &s, nil
}

// orDefault returns v, or def when v is zero.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// scaleSteps applies n to every capacity of a schedule.
func scaleSteps(steps []sim.Step, n func(int) int) []sim.Step {
	var out []sim.Step
	for _, st := range steps {
		out = append(out, sim.Step{At: st.At, Capacity: n(st.Capacity)})
	}
	return out
}
