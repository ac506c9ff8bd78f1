package scenario

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
)

// Result is one run of a scenario. Every duration and rate in it is in
// model time.
type Result struct {
	Scenario  *Scenario `json:"-"`
	TimeScale float64
	Seed      uint64
	Short     bool
	// Apart: the variants ran one after the other, not at the same time.
	Apart bool
	// Shape is the request body the clients sent.
	Shape   Shape
	Started time.Time
	// Wall is the real time the load ran (plus cutting).
	Wall     time.Duration
	Samples  []Sample `json:"-"`
	Variants []*VariantResult
	// Checks are the scenario's targets, when it has any.
	Checks []Check
}

// Variant returns the result of the named variant, or nil.
func (r *Result) Variant(name string) *VariantResult {
	for _, v := range r.Variants {
		if v.Variant.Name == name {
			return v
		}
	}
	return nil
}

// VariantResult is what one variant did.
type VariantResult struct {
	Variant Variant
	// Ceiling is the configured limit.ceiling (the oracle's first value).
	Ceiling int
	// Summary is the client's view over the scenario's duration (model
	// time). TTFT includes the wait in Sluice's queue.
	Summary load.Summary
	// TTFT and ITL repeat Summary.TTFT and Summary.ITL (ITL over every
	// gap between tokens).
	TTFT, ITL load.Percentiles
	// ProviderTTFT is the time to first token of streams from their
	// arrival at the provider (the provider's own queue and prefill,
	// without Sluice's queue), as measured by the simulated provider.
	ProviderTTFT load.Percentiles
	// Buckets is the client's view per model second.
	Buckets []load.Bucket `json:"-"`
	// Provider is the simulated provider's final counters.
	Provider sim.Stats
	// UpstreamRejected counts the provider's 429 and 529 answers.
	UpstreamRejected uint64
	// PhaseLimit is the mean of Sluice's limit over the second half of
	// each of the scenario's phases; PhaseInflight the same for the
	// requests running or queued inside the provider.
	PhaseLimit, PhaseInflight []float64
	// MeanLimit is the mean limit over the whole run.
	MeanLimit float64

	records []load.Record
}

func newVariantResult(sc *Scenario, st *stack, lr *load.Result, samples []Sample, i int) *VariantResult {
	scale := st.scale
	sum := lr.Summary()
	// Rates over the scenario's length, not the time it took to cut.
	span := time.Duration(float64(sc.Duration) * scale)
	sum.Elapsed = span
	sum.OKPerSecond = float64(sum.OK) / span.Seconds()
	sum.TokensPerSecond = float64(sum.Tokens) / span.Seconds()
	vr := &VariantResult{
		Variant:  st.v,
		Ceiling:  st.ceiling,
		Summary:  modelSummary(sum, scale),
		Provider: st.sim.Stats(),
		records:  lr.Records,
	}
	vr.TTFT, vr.ITL = vr.Summary.TTFT, vr.Summary.ITL
	vr.ProviderTTFT = st.model(load.PercentilesOf(st.sim.TTFT()))
	vr.UpstreamRejected = vr.Provider.Rejected429 + vr.Provider.Rejected529
	for _, b := range load.SeriesOf(lr.Records, span, time.Duration(float64(time.Second)*scale)) {
		b.Start = toModel(b.Start, scale)
		b.TTFTP50 = toModel(b.TTFTP50, scale)
		b.TTFTP99 = toModel(b.TTFTP99, scale)
		vr.Buckets = append(vr.Buckets, b)
	}
	for _, p := range sc.Phases {
		from := p.From + (p.To-p.From)/2
		var lim, inf float64
		n := 0
		for _, smp := range samples {
			if smp.T >= from && smp.T < p.To {
				v := smp.V[i]
				lim += float64(v.Limit)
				inf += float64(v.Running + v.Queued)
				n++
			}
		}
		if n > 0 {
			lim, inf = lim/float64(n), inf/float64(n)
		}
		vr.PhaseLimit = append(vr.PhaseLimit, lim)
		vr.PhaseInflight = append(vr.PhaseInflight, inf)
	}
	if len(samples) > 0 {
		for _, smp := range samples {
			vr.MeanLimit += float64(smp.V[i].Limit)
		}
		vr.MeanLimit /= float64(len(samples))
	}
	return vr
}

// modelSummary converts a real-time summary to model time.
func modelSummary(s load.Summary, scale float64) load.Summary {
	p := func(x load.Percentiles) load.Percentiles {
		return load.Percentiles{
			N: x.N, Mean: toModel(x.Mean, scale), P50: toModel(x.P50, scale), P90: toModel(x.P90, scale),
			P99: toModel(x.P99, scale), Max: toModel(x.Max, scale),
		}
	}
	s.Elapsed = toModel(s.Elapsed, scale)
	s.OKPerSecond *= scale
	s.TokensPerSecond *= scale
	s.TTFB, s.TTFT, s.Total, s.ITL = p(s.TTFB), p(s.TTFT), p(s.Total), p(s.ITL)
	s.Calls.TTFT, s.Calls.Total = p(s.Calls.TTFT), p(s.Calls.Total)
	s.RetryAfter = p(s.RetryAfter)
	s.Calls.Backoff = toModel(s.Calls.Backoff, scale)
	return s
}

// fmtDur formats a duration for tables: 3 significant digits, in ms below
// a second.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	case d < 10*time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
}
