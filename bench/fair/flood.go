package fair

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
)

// The provider of batch-flood: capacity 40, the reference provider's TTFT
// and decoding (ITL grows with load), short answers so a run sees many
// requests (a permit is held about 2 s at full load).
var (
	floodSim    = sim.Config{Schedule: []sim.Step{{Capacity: 40}}}
	floodPrompt = load.Dist{Mean: 500, Sigma: 0.5, Max: 4000}
	floodOutput = load.Dist{Mean: 50, Sigma: 0.5, Max: 200}
)

// BatchFlood: interactive traffic at about a fifth of the provider's
// capacity, alone and beside a batch flood at five times the capacity.
func BatchFlood() *Scenario {
	return &Scenario{
		Name:  "batch-flood",
		Title: "Batch flood at 5x capacity beside interactive traffic",
		About: "A provider with capacity 40 (it refuses beyond 1.5x), Sluice with gradient2 (ceiling 60) and the " +
			"default classes, batch capped at half the limit (`max_share: 0.5`, `saturated_share: 0.25`). " +
			"Interactive requests arrive at 3.5/s (about a fifth of what the provider completes); in the flood run " +
			"batch requests arrive at 85/s besides (five times). Two runs side by side, same seed: interactive alone, " +
			"and with the flood. Queue waits are Sluice's (its spans), after a 20 s warm-up.",
		Run: runBatchFlood,
	}
}

func floodConfig(p *config.Provider) {
	p.Limit.Ceiling = 60
	p.Queue.Classes[2].MaxShare, p.Queue.Classes[2].SaturatedShare = 0.5, 0.25
}

func runBatchFlood(ctx context.Context, opt Options) (*Report, error) {
	dur, skip := opt.seconds(90*time.Second, 8*time.Second), opt.seconds(20*time.Second, 2*time.Second)
	simCfg := floodSim
	simCfg.Seed = opt.Seed
	alone, err := newStack(simCfg, floodConfig)
	if err != nil {
		return nil, err
	}
	defer alone.close()
	flooded, err := newStack(simCfg, floodConfig)
	if err != nil {
		return nil, err
	}
	defer flooded.close()
	inter := func(st *stack) flow {
		return flow{"interactive", load.Config{
			URL: st.url, Stream: true, SimHeaders: true, Rate: 3.5, Duration: dur, Seed: opt.Seed,
			Prompt: floodPrompt, Output: floodOutput,
			Headers: map[string]string{"Authorization": "Bearer sk-chat-app", "X-Sluice-Class": "interactive"},
		}}
	}
	batch := flow{"batch", load.Config{
		URL: flooded.url, Stream: true, SimHeaders: true, Rate: 85, Duration: dur, Seed: opt.Seed + 1, MaxOpen: 5000,
		Prompt: floodPrompt, Output: floodOutput,
		Headers: map[string]string{"Authorization": "Bearer sk-batch-job", "X-Sluice-Class": "batch"},
	}}
	opt.logf("batch-flood: %v, two stacks side by side", dur)
	t0 := time.Now()
	runs := make([]map[string]*load.Result, 2)
	errs := make([]error, 2)
	done := make(chan struct{})
	go func() { runs[1], errs[1] = runFlows(ctx, []flow{inter(flooded), batch}); close(done) }()
	runs[0], errs[0] = runFlows(ctx, []flow{inter(alone)})
	<-done
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	from := t0.Add(skip)
	a, f := classView(alone.spans.since(from)), classView(flooded.spans.since(from))
	r := &Report{Scenario: BatchFlood(), Short: opt.Short}
	r.Tables = append(r.Tables, floodTable(a, f, dur-skip, runs, skip))
	slack := max(a.wait["interactive"].p99*11/10, a.wait["interactive"].p99+time.Millisecond)
	r.Checks = append(r.Checks,
		Check{
			Target: "interactive queue wait p99 with the flood within 10% of the unloaded run's (or 1 ms)",
			Got:    fmt.Sprintf("%s vs %s", fmtDur(f.wait["interactive"].p99), fmtDur(a.wait["interactive"].p99)),
			Met:    f.wait["interactive"].n > 0 && f.wait["interactive"].p99 <= slack,
		},
		Check{
			Target: "no interactive request refused while batch holds permits",
			Got:    fmt.Sprintf("%d refused; batch admitted %d (%.1f/s)", f.rejected["interactive"], f.admitted["batch"], float64(f.admitted["batch"])/(dur-skip).Seconds()),
			Met:    f.rejected["interactive"] == 0 && f.admitted["batch"] > 0,
		})
	return r, nil
}

// waits summarises the queue waits of one class.
type waits struct {
	n             int
	p50, p99, max time.Duration
}

// classes is Sluice's view of a run by class: waits of admitted requests,
// admitted and refused counts.
type classes struct {
	wait     map[string]waits
	admitted map[string]int
	rejected map[string]int
}

func classView(recs []spanRec) classes {
	c := classes{wait: map[string]waits{}, admitted: map[string]int{}, rejected: map[string]int{}}
	ds := map[string][]time.Duration{}
	for _, r := range recs {
		switch r.Rejected {
		case "":
			c.admitted[r.Class]++
			ds[r.Class] = append(ds[r.Class], r.Wait)
		case "client_gone":
		default:
			c.rejected[r.Class]++
		}
	}
	for cl, d := range ds {
		c.wait[cl] = waits{n: len(d), p50: quantile(d, 0.5), p99: quantile(d, 0.99), max: quantile(d, 1)}
	}
	return c
}

func floodTable(a, f classes, measured time.Duration, runs []map[string]*load.Result, skip time.Duration) string {
	s := "| run | class | admitted | refused | queue wait p50 / p99 / max | client TTFT p50 / p99 |\n|---|---|---|---|---|---|\n"
	row := func(run, class string, c classes, res *load.Result) {
		w := c.wait[class]
		ttft := "–"
		if res != nil {
			sum := load.Summarize(after(res.Records, skip), measured)
			ttft = fmtDur(sum.TTFT.P50) + " / " + fmtDur(sum.TTFT.P99)
		}
		s += fmt.Sprintf("| %s | %s | %d (%.1f/s) | %d | %s / %s / %s | %s |\n", run, class, c.admitted[class],
			float64(c.admitted[class])/measured.Seconds(), c.rejected[class], fmtDur(w.p50), fmtDur(w.p99), fmtDur(w.max), ttft)
	}
	row("alone", "interactive", a, runs[0]["interactive"])
	row("with the flood", "interactive", f, runs[1]["interactive"])
	row("with the flood", "batch", f, runs[1]["batch"])
	return s
}
