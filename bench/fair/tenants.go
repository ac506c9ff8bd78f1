package fair

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
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
	p.Limit.Algorithm = config.AlgorithmFixed
	p.Limit.Ceiling, p.Limit.Initial = exactCapacity, exactCapacity
}

// TwoTenants: tenants at ten times and once their fair share; then
// 20k-token prompts against 1k-token prompts, by tenant and FIFO.
func TwoTenants() *Scenario {
	return &Scenario{
		Name:  "two-tenants",
		Title: "Two tenants: 10x and 1x their fair share; 20k-token prompts against 1k",
		About: "A provider with capacity 20 and fixed service times, Sluice's limit fixed at 20, one class. " +
			"First, tenant A sends requests at ten times its fair share (half of 15.4/s) and tenant B at its fair share. " +
			"Then tenant A sends 20,000-token prompts at 5/s and tenant B 1,000-token prompts at 40/s, both far beyond " +
			"what they can get, twice side by side: each with its own API key (fair by tenant, by tokens), and both " +
			"with the same key (one tenant: first come, first served). Throughput and tokens after a 15 s warm-up.",
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
	measured := dur - skip
	simCfg := exactSim
	simCfg.Seed = opt.Seed
	r := &Report{Scenario: TwoTenants(), Short: opt.Short}

	st, err := newStack(simCfg, exactConfig)
	if err != nil {
		return nil, err
	}
	fair := float64(exactCapacity) / exactHold.Seconds() / 2
	opt.logf("two-tenants: 10x and 1x the fair share (%.1f/s), %v", fair, dur)
	res, err := runFlows(ctx, []flow{
		tenantFlow(st, "A", "sk-tenant-a", 10*fair, 400, dur, opt.Seed),
		tenantFlow(st, "B", "sk-tenant-b", fair, 400, dur, opt.Seed+1),
	})
	st.close()
	if err != nil {
		return nil, err
	}
	a, b := load.Summarize(after(res["A"].Records, skip), measured), load.Summarize(after(res["B"].Records, skip), measured)
	offeredB := float64(len(after(res["B"].Records, skip))) / measured.Seconds()
	r.Tables = append(r.Tables, fmt.Sprintf("| tenant | offered | completed | refused by Sluice |\n|---|---|---|---|\n"+
		"| A (10x its share) | %.1f/s | %.2f/s | %d |\n| B (1x its share) | %.1f/s | %.2f/s | %d |\n",
		float64(len(after(res["A"].Records, skip)))/measured.Seconds(), a.OKPerSecond, a.RejectedSluice,
		offeredB, b.OKPerSecond, b.RejectedSluice))
	r.Checks = append(r.Checks, Check{
		Target: "tenant at its fair share: throughput within 10% of its demand; the other gets the rest",
		Got: fmt.Sprintf("B %.2f/s of %.2f/s offered (%.0f%%); A %.2f/s; together %.2f/s of %.1f/s capacity",
			b.OKPerSecond, offeredB, 100*b.OKPerSecond/offeredB, a.OKPerSecond, a.OKPerSecond+b.OKPerSecond, 2*fair),
		Met: b.OKPerSecond >= 0.9*offeredB && a.OKPerSecond+b.OKPerSecond >= 0.9*2*fair,
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
		n := map[string]int{}
		for f, res := range runs[i] {
			for _, rec := range after(res.Records, skip) {
				if rec.Outcome == load.OK {
					tok[f] += rec.PromptTokens + rec.Tokens
					n[f]++
				}
			}
		}
		share := float64(tok["A"]) / float64(max(tok["A"]+tok["B"], 1))
		if i == 0 {
			ts.byTenant = share
		} else {
			ts.fifo = share
		}
		ts.rows += fmt.Sprintf("| %s | A | 20,000 | %d | %d | %.1f%% |\n| %s | B | 1,000 | %d | %d | %.1f%% |\n",
			name, n["A"], tok["A"], 100*share, name, n["B"], tok["B"], 100*(1-share))
	}
	return ts, nil
}

func (ts *tokenShares) table() string { return ts.rows }
