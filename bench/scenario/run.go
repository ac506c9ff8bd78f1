package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
)

// Options control a run.
type Options struct {
	// TimeScale is real time per model time; 0 means DefaultTimeScale.
	TimeScale float64
	// Seed seeds the providers and the load; 0 means 1.
	Seed uint64
	// Variants to run; nil means all of Variants.
	Variants []Variant
	// Short runs a reduced version for tests and CI: see Shorten.
	Short bool
	// Apart runs the variants one after the other instead of at the same
	// time, each on the whole machine: at hundreds of streams per variant
	// they would otherwise share its cores and measure each other.
	Apart bool
	// Shape is the request body the clients send; the zero value,
	// ShapeMaxTokens, names the drawn output size as max_tokens.
	Shape Shape
	// SampleEvery is the sampling interval in model time; 0 means 1 s.
	SampleEvery time.Duration
	// OnSample, when set, gets every sample as it is taken (from the
	// sampling goroutine).
	OnSample func(Sample)
	// Logf, when set, receives progress messages.
	Logf func(format string, args ...any)
}

// DefaultTimeScale runs scenarios 4x faster than model time: a 240 s
// scenario takes a minute.
const DefaultTimeScale = 0.25

// Sample is the state of every variant at one instant.
type Sample struct {
	// T is model time since the start of the load.
	T time.Duration
	// V holds one entry per variant, in the order of Result.Variants.
	V []VariantSample
}

// VariantSample is one variant's state at a sample.
type VariantSample struct {
	// Capacity, Running and Queued are the provider's.
	Capacity, Running, Queued int
	// Limit, Inflight and Waiting are Sluice's, from /admin/status;
	// Binding names the part of the limit that sets it (delay, loss, rate,
	// min, ceiling or fixed).
	Limit, Inflight, Waiting int
	Binding                  string
	// UpstreamRejected (provider 429/529s) and SluiceRejected (refused by
	// Sluice's queue: full, timed out, over the deadline, displaced) are
	// totals since the start.
	UpstreamRejected uint64
	SluiceRejected   uint64
	// UpstreamRequests, QuotaRequests and QuotaTokens are totals since
	// the start: requests that reached the provider, and what its quota
	// admitted (requests, prompt plus max_tokens).
	UpstreamRequests, QuotaRequests, QuotaTokens uint64
	// OK counts requests completed since the previous sample.
	OK int
	// TTFTP50 and TTFTP99 (model time) are over the first tokens seen
	// since the previous sample; TTFTCount is how many. Zero when none.
	TTFTP50, TTFTP99 time.Duration
	TTFTCount        int
	// ProviderTTFTP50 and ProviderTTFTP99 (model time) are the provider's
	// measurements from a stream's arrival to its first token (no wait in
	// Sluice's queue), over the first tokens sent since the previous
	// sample. Zero when none.
	ProviderTTFTP50, ProviderTTFTP99 time.Duration
}

// Run runs sc once for every variant at the same time and returns the
// measurements. It takes sc.Duration x TimeScale of wall time plus setup.
func Run(ctx context.Context, sc *Scenario, opt Options) (*Result, error) {
	if sc.TimeScale > 0 {
		opt.TimeScale = sc.TimeScale
	}
	if opt.TimeScale <= 0 {
		opt.TimeScale = DefaultTimeScale
	}
	if opt.Seed == 0 {
		opt.Seed = 1
	}
	if opt.Variants == nil {
		opt.Variants = sc.variants()
	}
	if opt.SampleEvery <= 0 {
		opt.SampleEvery = time.Second
	}
	if opt.Apart && len(opt.Variants) > 1 {
		return runApart(ctx, sc, opt)
	}
	if opt.Short {
		sc = Shorten(sc)
	}
	if len(opt.Variants) == 0 {
		return nil, errors.New("scenario: no variants")
	}
	scale := opt.TimeScale
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}

	stacks := make([]*stack, 0, len(opt.Variants))
	defer func() {
		for _, st := range stacks {
			st.close()
		}
	}()
	for _, v := range opt.Variants {
		st, err := newStack(sc, v, scale, opt.Seed)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
		}
		stacks = append(stacks, st)
	}
	toReal := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	logf("%s: %d variants for %v (model %v at time scale %g), %s", sc.Name, len(stacks), toReal(sc.Duration).Round(time.Second/10), sc.Duration, scale, opt.Shape.Label())

	// Start every provider's schedule at the same instant.
	t0 := time.Now()
	for _, st := range stacks {
		if len(sc.Sim.Schedule) > 0 {
			st.sim.SetSchedule(sc.Sim.Schedule)
		}
		st.sim.ResetMax()
	}
	res := &Result{Scenario: sc, TimeScale: scale, Seed: opt.Seed, Short: opt.Short, Shape: opt.Shape, Started: t0}
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	bg := &background{fail: cancelRun}
	bgCtx, stopBG := context.WithCancel(runCtx)
	for _, st := range stacks {
		if st.v.Oracle {
			bg.run(func() error { return runOracle(bgCtx, st, sc.oracleSteps(), t0, scale) })
		}
	}
	bg.run(func() error { return sample(bgCtx, stacks, res, opt, t0) })

	results := make([]*load.Result, len(stacks))
	errs := make([]error, len(stacks))
	var wg sync.WaitGroup
	for i, st := range stacks {
		cfg := loadConfig(sc, st, scale, opt.Seed, opt.Shape)
		wg.Go(func() { results[i], errs[i] = load.Run(runCtx, cfg) })
	}
	wg.Wait()
	stopBG()
	bgErr := bg.wait()
	res.Wall = time.Since(t0)
	if err := errors.Join(append(errs, bgErr)...); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	// Stop Sluice and the providers, then read the providers' totals.
	for _, st := range stacks {
		st.close()
	}
	for i, st := range stacks {
		res.Variants = append(res.Variants, newVariantResult(sc, st, results[i], res.Samples, i))
	}
	stacks = nil
	if sc.Targets != nil {
		res.Checks = sc.Targets(res)
	}
	return res, nil
}

// runApart runs each variant alone, one after the other with the same
// seed, and joins their results as one run's: samples are joined by their
// index (each run's first sample is its first second).
func runApart(ctx context.Context, sc *Scenario, opt Options) (*Result, error) {
	var res *Result
	for _, v := range opt.Variants {
		o := opt
		o.Variants, o.Apart = []Variant{v}, false
		r, err := Run(ctx, sc, o)
		if err != nil {
			return nil, err
		}
		if res == nil {
			res = r
			res.Apart = true
			continue
		}
		res.Variants = append(res.Variants, r.Variants...)
		res.Wall += r.Wall
		n := min(len(res.Samples), len(r.Samples))
		res.Samples = res.Samples[:n]
		for i := range n {
			res.Samples[i].V = append(res.Samples[i].V, r.Samples[i].V...)
		}
	}
	res.Checks = nil
	if res.Scenario.Targets != nil {
		res.Checks = res.Scenario.Targets(res)
	}
	return res, nil
}

// background runs the oracle and the sampler next to the load; the first
// error of either ends the run (fail cancels the load).
type background struct {
	fail context.CancelFunc
	wg   sync.WaitGroup
	mu   sync.Mutex
	err  error
}

func (b *background) run(fn func() error) {
	b.wg.Go(func() {
		if err := fn(); err != nil {
			b.mu.Lock()
			b.err = errors.Join(b.err, err)
			b.mu.Unlock()
			b.fail()
		}
	})
}

// wait waits for every function and returns their errors.
func (b *background) wait() error {
	b.wg.Wait()
	return b.err
}

// sample appends a Sample of every stack to res every opt.SampleEvery
// (model time) until ctx ends.
func sample(ctx context.Context, stacks []*stack, res *Result, opt Options, t0 time.Time) error {
	tk := time.NewTicker(time.Duration(float64(opt.SampleEvery) * res.TimeScale))
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tk.C:
			// Every stack at once: the variants' states are of one instant.
			smp := Sample{T: toModel(now.Sub(t0), res.TimeScale), V: make([]VariantSample, len(stacks))}
			errs := make([]error, len(stacks))
			var wg sync.WaitGroup
			for i, st := range stacks {
				wg.Go(func() { smp.V[i], errs[i] = st.sample() })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				return err
			}
			res.Samples = append(res.Samples, smp)
			if opt.OnSample != nil {
				opt.OnSample(smp)
			}
		}
	}
}

// runOracle sets the oracle's limit at every step of its schedule.
func runOracle(ctx context.Context, st *stack, steps []sim.Step, t0 time.Time, scale float64) error {
	for _, step := range steps[1:] {
		at := t0.Add(time.Duration(float64(step.At) * scale))
		t := time.NewTimer(time.Until(at))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if err := st.setCeiling(step.Capacity); err != nil {
			return fmt.Errorf("oracle: %w", err)
		}
	}
	return nil
}

// loadConfig converts the scenario's traffic to real time for one stack,
// with the request body of shape.
func loadConfig(sc *Scenario, st *stack, scale float64, seed uint64, shape Shape) load.Config {
	l := sc.Load
	cfg := load.Config{
		URL:          st.url,
		Stream:       !l.NonStream,
		SimHeaders:   true,
		Clients:      l.Clients,
		Think:        time.Duration(float64(l.Think) * scale),
		Duration:     time.Duration(float64(sc.Duration) * scale),
		Prompt:       l.Prompt,
		Output:       l.Output,
		MaxTokens:    shape.maxTokens(),
		Seed:         seed,
		MaxOpen:      5000,
		OnFirstToken: st.live.firstToken,
		OnEnd:        st.live.end,
	}
	if l.Clients == 0 {
		cfg.Rate = l.Rate / scale
		if l.RateAt != nil {
			cfg.MaxRate = l.MaxRate / scale
			cfg.RateAt = func(e time.Duration) float64 { return l.RateAt(toModel(e, scale)) / scale }
		}
	}
	return cfg
}

// Shorten returns a reduced copy of sc for tests and CI: 12 s of model
// time (the schedule, phases and arrival rate compressed to fit), a
// twentieth of the closed-loop clients (at least 4), a quarter of the
// open-loop rate, and outputs of about 8 tokens. It exercises the same
// machinery in a second or two; its numbers mean nothing.
func Shorten(sc *Scenario) *Scenario {
	const d = 12 * time.Second
	c := *sc
	k := float64(d) / float64(sc.Duration)
	at := func(t time.Duration) time.Duration { return time.Duration(float64(t) * k) }
	c.Duration = d
	c.Sim.Schedule = nil
	for _, st := range sc.Sim.Schedule {
		c.Sim.Schedule = append(c.Sim.Schedule, sim.Step{At: at(st.At), Capacity: st.Capacity})
	}
	c.Oracle = nil
	for _, st := range sc.Oracle {
		c.Oracle = append(c.Oracle, sim.Step{At: at(st.At), Capacity: st.Capacity})
	}
	c.Phases = nil
	for _, p := range sc.Phases {
		c.Phases = append(c.Phases, Phase{Name: p.Name, From: at(p.From), To: at(p.To)})
	}
	if c.Load.Clients > 0 {
		c.Load.Clients = max(4, c.Load.Clients/20)
	}
	c.Load.Rate /= 4
	c.Load.MaxRate /= 4
	if f := sc.Load.RateAt; f != nil {
		c.Load.RateAt = func(t time.Duration) float64 { return f(time.Duration(float64(t)/k)) / 4 }
	}
	c.Load.Output = load.Dist{Mean: 8, Sigma: 0.5, Max: 16}
	return &c
}
