package fair

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// The provider of two-tenants and early-rejection: capacity 20 and
// deterministic service (no TTFT jitter, decoding speed independent of
// load, never refusing), so that a permit is held 0.25 s + prefill +
// 20 ms per output token and the capacity in requests per second is
// known: 20 permits / 1.3 s = 15.4/s for 400-token prompts and 50-token
// answers. Sluice's limit is fixed at the capacity: these scenarios are
// about the queue, not the controller.
var exactSim = sim.Config{Schedule: []sim.Step{{Capacity: 20}}, JitterSigma: -1, ITLLoad: -1, OverloadFactor: -1}

const (
	exactCapacity = 20
	exactHold     = 1300 * time.Millisecond // 400-token prompt, 50-token answer
)

func exactConfig(p *config.Provider) {
	p.Limit.Algorithm = settings.AlgorithmFixed
	p.Limit.Ceiling, p.Limit.Initial = exactCapacity, exactCapacity
}

// TwoTenants: tenants at ten times and once their fair share; then
// 20k-token prompts against 1k-token prompts, by tenant and FIFO.
func TwoTenants() *Scenario {
	return &Scenario{
		Name:  "two-tenants",
		Title: "Two tenants: 10x and 1x their fair share; 20k-token prompts against 1k",
		About: "A provider with capacity 20 and fixed service times, Sluice's limit fixed at 20, one class. " +
			"First the capacity is measured (one tenant flooding for 25 s: requests completed per second over the last 10 s); " +
			"then tenant A sends requests at ten times its fair share (half the capacity) and tenant B at its fair share. " +
			"Then tenant A sends 20,000-token prompts at 5/s and tenant B 1,000-token prompts at 40/s, both far beyond " +
			"what they can get, twice side by side: each with its own API key (fair by tenant, by tokens), and both " +
			"with the same key (one tenant: first come, first served). Arrivals by start, completions and their tokens by end, after a 15 s warm-up.",
		Run: runTwoTenants,
	}
}

func tenantFlow(st *stack, name, key string, rate float64, prompt int, dur time.Duration, seed uint64) flow {
	return flow{name, load.Config{
		URL: st.url, Stream: true, SimHeaders: true, Rate: rate, Duration: dur, Seed: seed, MaxOpen: 5000,
		Prompt: load.Dist{Mean: float64(prompt)}, Output: load.Dist{Mean: 50},
		Headers: map[string]string{"Authorization": "Bearer " + key},
	}}
}

func runTwoTenants(ctx context.Context, opt Options) (*Report, error) {
	dur, skip := opt.seconds(75*time.Second, 8*time.Second), opt.seconds(15*time.Second, 2*time.Second)
	simCfg := exactSim
	simCfg.Seed = opt.Seed
	r := &Report{Scenario: TwoTenants(), Short: opt.Short}

	st, err := newStack(simCfg, exactConfig)
	if err != nil {
		return nil, err
	}
	capacity, err := calibrate(ctx, st, opt)
	if err != nil {
		st.close()
		return nil, err
	}
	fair := capacity / 2
	opt.logf("two-tenants: 10x and 1x the fair share (%.1f/s), %v", fair, dur)
	res, err := runFlows(ctx, []flow{
		tenantFlow(st, "A", "sk-tenant-a", 10*fair, 400, dur, opt.Seed),
		tenantFlow(st, "B", "sk-tenant-b", fair, 400, dur, opt.Seed+1),
	})
	st.close()
	if err != nil {
		return nil, err
	}
	a, b := windowOf(res["A"].Records, skip, dur), windowOf(res["B"].Records, skip, dur)
	r.Tables = append(r.Tables, fmt.Sprintf("| tenant | offered | completed | refused by Sluice |\n|---|---|---|---|\n"+
		"| A (10x its share) | %.2f/s | %.2f/s | %d |\n| B (1x its share) | %.2f/s | %.2f/s | %d |\n",
		a.offered, a.completed, a.refused, b.offered, b.completed, b.refused))
	r.Checks = append(r.Checks, Check{
		Target: "tenant at its fair share: throughput within 10% of its demand; the other gets the rest (together at least 95% of the capacity)",
		Got: fmt.Sprintf("B %.2f/s of %.2f/s offered (%.0f%%); A %.2f/s; together %.2f/s of %.2f/s measured alone",
			b.completed, b.offered, 100*b.completed/b.offered, a.completed, a.completed+b.completed, capacity),
		Met: b.completed >= 0.9*b.offered && a.completed+b.completed >= 0.95*capacity,
	})

	shares, err := runTokenShares(ctx, opt, simCfg, dur, skip)
	if err != nil {
		return nil, err
	}
	r.Tables = append(r.Tables, shares.table())
	r.Checks = append(r.Checks, Check{
		Target: "20k-token prompts get no more than their share of tokens (50% +- 5)",
		Got:    fmt.Sprintf("%.1f%% by tenant (%.1f%% when both are one tenant, first come first served)", 100*shares.byTenant, 100*shares.fifo),
		Met:    shares.byTenant >= 0.45 && shares.byTenant <= 0.55,
	})
	return r, nil
}

// calibrate measures the provider's capacity in requests per second (of
// 400-token prompts and 50-token answers) through st: one tenant at three
// times the nominal capacity for 25 s, completions counted over the last
// 10 s (the queue is full by then).
func calibrate(ctx context.Context, st *stack, opt Options) (float64, error) {
	dur, skip := opt.seconds(25*time.Second, 4*time.Second), opt.seconds(15*time.Second, time.Second)
	opt.logf("two-tenants: measuring the capacity, %v", dur)
	nominal := float64(exactCapacity) / exactHold.Seconds()
	res, err := runFlows(ctx, []flow{tenantFlow(st, "calibrate", "sk-calibrate", 3*nominal, 400, dur, opt.Seed+7)})
	if err != nil {
		return 0, err
	}
	return windowOf(res["calibrate"].Records, skip, dur).completed, nil
}

// tokenShares is the second part of two-tenants: the large prompts' share
// of the tokens served, by tenant and FIFO.
type tokenShares struct {
	byTenant, fifo float64
	rows           string
}

func runTokenShares(ctx context.Context, opt Options, simCfg sim.Config, dur, skip time.Duration) (*tokenShares, error) {
	fairSt, err := newStack(simCfg, exactConfig)
	if err != nil {
		return nil, err
	}
	defer fairSt.close()
	fifoSt, err := newStack(simCfg, exactConfig)
	if err != nil {
		return nil, err
	}
	defer fifoSt.close()
	opt.logf("two-tenants: 20k-token prompts against 1k, by tenant and FIFO side by side, %v", dur)
	var runs [2]map[string]*load.Result
	var errs [2]error
	done := make(chan struct{})
	go func() {
		runs[1], errs[1] = runFlows(ctx, []flow{
			tenantFlow(fifoSt, "A", "sk-one-tenant", 5, 20000, dur, opt.Seed),
			tenantFlow(fifoSt, "B", "sk-one-tenant", 40, 1000, dur, opt.Seed+1),
		})
		close(done)
	}()
	runs[0], errs[0] = runFlows(ctx, []flow{
		tenantFlow(fairSt, "A", "sk-tenant-a", 5, 20000, dur, opt.Seed),
		tenantFlow(fairSt, "B", "sk-tenant-b", 40, 1000, dur, opt.Seed+1),
	})
	<-done
	if errs[0] != nil || errs[1] != nil {
		return nil, fmt.Errorf("%w; %w", errs[0], errs[1])
	}
	ts := &tokenShares{rows: "| queue | tenant | prompt | requests completed | tokens completed (prompt + output) | share of tokens |\n|---|---|---|---|---|---|\n"}
	for i, name := range []string{"fair by tenant", "one tenant (FIFO)"} {
		tok := map[string]int{}
		n := map[string]float64{}
		for f, res := range runs[i] {
			w := windowOf(res.Records, skip, dur)
			tok[f], n[f] = w.tokens, w.completed*(dur-skip).Seconds()
		}
		share := float64(tok["A"]) / float64(max(tok["A"]+tok["B"], 1))
		if i == 0 {
			ts.byTenant = share
		} else {
			ts.fifo = share
		}
		ts.rows += fmt.Sprintf("| %s | A | 20,000 | %.0f | %d | %.1f%% |\n| %s | B | 1,000 | %.0f | %d | %.1f%% |\n",
			name, n["A"], tok["A"], 100*share, name, n["B"], tok["B"], 100*(1-share))
	}
	return ts, nil
}

func (ts *tokenShares) table() string { return ts.rows }
