// Package scenario runs Sluice's benchmark scenarios: a simulated provider
// (bench/sim) behind the real Sluice handler (proxy) over loopback, driven
// by the streaming load generator (bench/load), once per limiter variant,
// all variants at the same time on identical providers with the same seed.
//
// # Variants
//
// Every scenario compares four ways of limiting concurrency ([Variants]):
// fixed at the ceiling (what a gateway with a static limit does), fixed at
// the provider's true capacity (an oracle that knows the schedule: its
// config is reloaded with the new limit.ceiling at every capacity step, as
// an operator with perfect knowledge would), aimd (loss only) and
// gradient2 (delay and loss). Each variant gets its own simulated provider
// (same configuration, same seed, schedules started at the same instant),
// its own proxy.Server on a loopback listener, and its own load generator
// with the same seed, so every variant sees the same clients, sizes and
// think times, in the same wall-clock time.
//
// bench drives Sluice as an operator would: it applies configs
// (proxy.Server.Apply) and reads Sluice's state from /admin/status. The
// provider-side TTFT is measured where it happens, in the simulated
// provider ([sim.Server.TTFT]).
//
// # Request shape
//
// The clients name each request's drawn output size as max_tokens
// ([ShapeMaxTokens]), or send none, as most chat code does
// ([ShapeNoMaxTokens], [Options.Shape]); the provider produces the drawn
// length either way (x-sim-output-tokens), so the shapes differ only in
// what Sluice can read from the body. `sluice-bench scenarios -shapes
// both` runs every scenario once per shape, one run after the other, and
// reports them side by side (two rows per variant); it takes twice as
// long, so the suite's default (and `make bench`) is max_tokens alone.
//
// # Time
//
// Scenarios are written in model time: the provider's time (see bench/sim).
// A run executes them faster with [Options.TimeScale] (real = model x
// scale). Everything time-based is scaled by the same factor so that the
// controllers see the same dynamics as at full speed: the simulator's
// durations, the load's think times and arrival rates (rates by 1/scale),
// and Sluice's limit.window, limit.cooldown, limit.ttft_target,
// queue.max_wait and timeouts, with limit.prefill_tokens_per_second and
// limit.min_token_rate multiplied by 1/scale. Reports convert every
// measured duration back to model time, so numbers read as if the run had
// been at full speed. limit.window has a floor of 100 ms (config), so
// scales below 0.05 shorten the scenario but not the window.
package scenario

import (
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// Scenario is one benchmark situation, in model time.
type Scenario struct {
	// Name is short and file-name safe ("capacity-step").
	Name string
	// Title is a one-line heading; About says what the scenario models
	// and what to look for (Markdown).
	Title, About string
	// Duration is how long load is applied.
	Duration time.Duration
	// Sim is the provider; Run sets TimeScale and Seed.
	Sim sim.Config
	// Load is the traffic.
	Load Load
	// Ceiling is limit.ceiling for every variant except the oracle.
	Ceiling int
	// MaxWaiting, when > 0, is queue.max_waiting of every variant.
	MaxWaiting int
	// Capacity, when set, is the capacity the scenario is built at (see
	// AtCapacity). AtCapacity, when set, builds the scenario at another
	// capacity; otherwise the scenario is scaled. NoCapacity, when set,
	// says why the scenario does not scale.
	Capacity   int
	AtCapacity func(c int) *Scenario
	NoCapacity string
	// scaledFrom names the scenario AtCapacity made this one from.
	scaledFrom string
	// Oracle is the oracle's limit over time; nil means the capacity
	// schedule. OracleNote explains it when it is not the capacity.
	Oracle     []sim.Step
	OracleNote string
	// Tune adjusts the limit settings of the adaptive variants (aimd,
	// gradient2), in model time; Run scales the result. Nil keeps the
	// defaults.
	Tune func(*settings.Limit)
	// Variants are the variants this scenario compares; nil means the
	// four of Variants.
	Variants []Variant
	// TimeScale, when > 0, is the time scale the scenario always runs at,
	// whatever the run's option: a provider that reports per-minute
	// quotas in its headers must run in real time (1) for Sluice to learn
	// them as real providers report them.
	TimeScale float64
	// Phases name periods for per-phase figures (mean limit per phase).
	Phases []Phase
	// Targets, when set, checks the scenario's stated goals.
	Targets func(r *Result) []Check
}

// Load is the traffic of a scenario, in model time.
type Load struct {
	// Clients > 0: closed loop with Think (mean, exponential) between
	// requests. Otherwise open loop at Rate per second, or RateAt(t)
	// bounded by MaxRate.
	Clients int
	Think   time.Duration
	Rate    float64
	RateAt  func(t time.Duration) float64
	MaxRate float64
	// Prompt and Output sizes in tokens.
	Prompt, Output load.Dist
	// NonStream asks for whole answers ("stream": false) instead of
	// server-sent events: Sluice sees no time to first token.
	NonStream bool
}

// Phase is a named period of a scenario.
type Phase struct {
	Name     string
	From, To time.Duration
}

// Check is one target and whether it was met.
type Check struct {
	Target string // what was promised
	Got    string // what was measured
	Met    bool
}

// Variant is one way of limiting concurrency.
type Variant struct {
	// Name is file-name safe; Label is for tables and legends.
	Name, Label string
	// Algorithm is limit.algorithm.
	Algorithm string
	// Oracle makes a fixed limit that follows the scenario's Oracle
	// schedule instead of the ceiling.
	Oracle bool
	// Direct sends the load straight to the provider, without Sluice.
	Direct bool
	// Provider, when set, adjusts the variant's provider config (rate,
	// retries, ...) in model time, after Tune; Run scales the result.
	Provider func(*config.Provider) `json:"-"`
	// Color is the variant's colour in charts.
	Color string
}

// Variants are the four limiters every scenario compares, in report order.
var Variants = []Variant{
	{Name: "fixed-ceiling", Label: "fixed @ ceiling", Algorithm: settings.AlgorithmFixed, Color: "#d62728"},
	{Name: "oracle", Label: "fixed @ capacity (oracle)", Algorithm: settings.AlgorithmFixed, Oracle: true, Color: "#2ca02c"},
	{Name: "aimd", Label: "aimd", Algorithm: settings.AlgorithmAIMD, Color: "#ff7f0e"},
	{Name: "gradient2", Label: "gradient2", Algorithm: settings.AlgorithmGradient2, Color: "#1f77b4"},
}

// variants returns the variants sc compares.
func (s *Scenario) variants() []Variant {
	if s.Variants != nil {
		return s.Variants
	}
	return Variants
}

// VariantByName returns the variant called name.
func VariantByName(name string) (Variant, bool) {
	for _, v := range Variants {
		if v.Name == name {
			return v, true
		}
	}
	return Variant{}, false
}

// oracleSteps returns the oracle's schedule.
func (s *Scenario) oracleSteps() []sim.Step {
	if len(s.Oracle) > 0 {
		return s.Oracle
	}
	if len(s.Sim.Schedule) > 0 {
		return s.Sim.Schedule
	}
	return []sim.Step{{Capacity: sim.DefaultCapacity}}
}

// capacityAt returns the provider's capacity at model time t.
func (s *Scenario) capacityAt(t time.Duration) int {
	return stepAt(s.Sim.Schedule, t, sim.DefaultCapacity)
}

// stepAt returns the value of a schedule at t (def if empty).
func stepAt(steps []sim.Step, t time.Duration, def int) int {
	v := def
	for i, st := range steps {
		if i == 0 || st.At <= t {
			v = st.Capacity
		}
	}
	return v
}

// providerName is the name of the one provider of every variant's config.
const providerName = "sim"

// providerConfig returns the Sluice config for one variant: one provider
// "sim" at prefix /sim in front of upstream, with every model-time setting
// scaled to real time by scale. ceiling is the variant's limit.
func providerConfig(sc *Scenario, v Variant, upstream string, ceiling int, scale float64) *config.Config {
	p := config.DefaultProvider()
	p.Name = providerName
	p.Upstream = upstream
	p.Match.PathPrefix = "/sim"
	p.Limit.Algorithm = v.Algorithm
	p.Limit.Ceiling = ceiling
	p.Limit.Min = min(p.Limit.Min, ceiling)
	p.Limit.Initial = min(p.Limit.Initial, ceiling)
	if sc.MaxWaiting > 0 {
		p.Queue.MaxWaiting = sc.MaxWaiting
	}
	if !v.Oracle && v.Algorithm != settings.AlgorithmFixed && sc.Tune != nil {
		sc.Tune(&p.Limit)
	}
	if v.Provider != nil {
		v.Provider(&p)
	}
	scaleLimits(&p, scale)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = config.AdminOff
	cfg.Shutdown.Grace = 0
	cfg.Tracing.Exporter = "none"
	cfg.Providers = []config.Provider{p}
	return cfg
}

// scaleLimits converts a provider's model-time settings to real time.
func scaleLimits(p *config.Provider, scale float64) {
	d := func(v time.Duration) time.Duration { return time.Duration(float64(v) * scale) }
	p.Limit.Window = max(d(p.Limit.Window), 100*time.Millisecond)
	p.Limit.Cooldown = d(p.Limit.Cooldown)
	if p.Limit.TTFTTarget > 0 {
		p.Limit.TTFTTarget = max(d(p.Limit.TTFTTarget), time.Millisecond)
	}
	if p.Limit.PrefillRate > 0 {
		p.Limit.PrefillRate = min(p.Limit.PrefillRate/scale, 1e7)
	}
	p.Limit.MinTokenRate /= scale
	p.Queue.MaxWait = d(p.Queue.MaxWait)
	p.Queue.MaxClientWait = d(p.Queue.MaxClientWait)
	p.Timeouts.FirstToken = max(d(p.Timeouts.FirstToken), time.Millisecond)
	p.Timeouts.Idle = max(d(p.Timeouts.Idle), time.Millisecond)
	p.Timeouts.Total = max(d(p.Timeouts.Total), p.Timeouts.FirstToken)
	// Per-minute rates: a model minute is scale real minutes.
	perMin := func(n int) int {
		if n == 0 {
			return 0
		}
		return max(int(float64(n)/scale), 1)
	}
	r := &p.Rate
	r.RPM, r.TPM, r.InputTPM, r.OutputTPM = perMin(r.RPM), perMin(r.TPM), perMin(r.InputTPM), perMin(r.OutputTPM)
	r.RequestWindow = max(d(r.RequestWindow), 100*time.Millisecond)
	r.PerClient.RPM, r.PerClient.TPM = perMin(r.PerClient.RPM), perMin(r.PerClient.TPM)
	r.PerClient.InputTPM, r.PerClient.OutputTPM = perMin(r.PerClient.InputTPM), perMin(r.PerClient.OutputTPM)
	rt := &p.Retries
	rt.BudgetWindow = max(d(rt.BudgetWindow), time.Second)
	rt.MinPerSecond /= scale
	rt.BackoffBase = max(d(rt.BackoffBase), time.Millisecond)
	rt.BackoffMax = max(d(rt.BackoffMax), rt.BackoffBase)
	rt.MaxRetryAfter = d(rt.MaxRetryAfter)
	b := &p.Breaker
	b.Window = max(d(b.Window), time.Second)
	b.OpenTime = max(d(b.OpenTime), 100*time.Millisecond)
	b.QuotaOpenTime = max(d(b.QuotaOpenTime), time.Second)
}
