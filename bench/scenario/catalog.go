package scenario

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// Traffic shared by most scenarios (the simulated provider's defaults, bench/sim): prompts lognormal
// around 1,000 tokens, outputs around 250 (cap 2,000), 200 closed-loop
// clients thinking 1 s on average.
var (
	stdPrompt = load.Dist{Mean: 1000, Sigma: 0.5, Max: 8000}
	stdOutput = load.Dist{Mean: 250, Sigma: 0.5, Max: 2000}
	stdLoad   = Load{Clients: 200, Think: time.Second, Prompt: stdPrompt, Output: stdOutput}
)

const sec = time.Second

// All returns every scenario, in report order.
func All() []*Scenario {
	return []*Scenario{
		CapacityStep(),
		Overload(),
		Bursts(),
		NoisyTTFT(),
		GradualSlowdown(),
		DecodeBound(),
		MixedPrompts(),
		NonStreaming(),
		RateLimited(),
		ProviderQuota(sim.QuotaHeadersOpenAI),
		ProviderQuota(sim.QuotaHeadersAnthropic),
	}
}

// ByName returns the named scenario, of the suite or at scale.
func ByName(name string) (*Scenario, bool) {
	for _, sc := range append(All(), Scale()...) {
		if sc.Name == name {
			return sc, true
		}
	}
	return nil, false
}

// CapacityStep is the suite's reference scenario:
// capacity 40, then 20, then 40 again.
func CapacityStep() *Scenario {
	return &Scenario{
		Name:  "capacity-step",
		Title: "Capacity step 40 → 20 → 40",
		About: "The provider's hidden capacity halves for the middle third, then recovers. " +
			"200 closed-loop clients keep it saturated. A static limit of 50 is harmless at C=40 " +
			"(the provider queues 10) but sends 50 into a provider that refuses beyond 1.5 C = 30 at C=20. " +
			"Watch the limit follow the capacity down and back up, and the upstream 429s.",
		Duration: 240 * sec,
		Sim:      sim.Config{Schedule: []sim.Step{{Capacity: 40}, {At: 80 * sec, Capacity: 20}, {At: 160 * sec, Capacity: 40}}},
		Load:     stdLoad,
		Ceiling:  50,
		Phases:   []Phase{{"C=40", 0, 80 * sec}, {"C=20", 80 * sec, 160 * sec}, {"C=40 again", 160 * sec, 240 * sec}},
		Targets:  capacityStepTargets,
	}
}

// capacityStepTargets checks the targets for gradient2 (Sluice's
// default algorithm).
func capacityStepTargets(r *Result) []Check {
	fc, or, g := r.Variant("fixed-ceiling"), r.Variant("oracle"), r.Variant("gradient2")
	if fc == nil || or == nil || g == nil {
		return nil
	}
	var checks []Check
	fr, gr := fc.UpstreamRejected, g.UpstreamRejected
	ratio := math.Inf(1)
	if gr > 0 {
		ratio = float64(fr) / float64(gr)
	}
	checks = append(checks, Check{
		Target: "upstream 429/529s at least 50x fewer than fixed @ ceiling",
		Got:    fmt.Sprintf("%d vs %d (%s)", gr, fr, ratioString(ratio)),
		Met:    fr > 0 && ratio >= 50,
	})
	pct := 0.0
	if or.Summary.OK > 0 {
		pct = 100 * float64(g.Summary.OK) / float64(or.Summary.OK)
	}
	checks = append(checks, Check{
		Target: "completed requests at least 95% of the oracle",
		Got:    fmt.Sprintf("%d vs %d (%.1f%%)", g.Summary.OK, or.Summary.OK, pct),
		Met:    pct >= 95,
	})
	checks = append(checks, Check{
		Target: "client TTFT p99 (queue wait included) no worse than fixed @ ceiling",
		Got:    fmt.Sprintf("%s vs %s", fmtDur(g.TTFT.P99), fmtDur(fc.TTFT.P99)),
		Met:    g.TTFT.P99 > 0 && g.TTFT.P99 <= fc.TTFT.P99,
	})
	return checks
}

func ratioString(r float64) string {
	if math.IsInf(r, 1) {
		return "none with gradient2"
	}
	return fmt.Sprintf("%.0fx fewer", r)
}

// Overload is a steady open-loop overload at twice what the provider can
// serve.
func Overload() *Scenario {
	return &Scenario{
		Name:  "overload-2x",
		Title: "Steady 2x overload (open loop)",
		About: "Poisson arrivals at 8 requests/s against a provider that completes about 4/s at C=40. " +
			"Half the traffic cannot be served whatever the limiter does; the question is who says no and how fast. " +
			"With a ceiling of 80 a static limit pushes the provider past 1.5 C and gets 429s; " +
			"an adaptive limit keeps the provider at its capacity and lets Sluice's queue " +
			"(max_wait 10 s) shed the excess with its own 429s, which clients can tell apart.",
		Duration: 180 * sec,
		Sim:      sim.Config{Schedule: []sim.Step{{Capacity: 40}}},
		Load:     Load{Rate: 8, Prompt: stdPrompt, Output: stdOutput},
		Ceiling:  80,
		Phases:   []Phase{{"all", 0, 180 * sec}},
	}
}

// Bursts is a moderate open-loop load with three short bursts.
func Bursts() *Scenario {
	return &Scenario{
		Name:  "bursts",
		Title: "Bursts: 2/s with 10 s bursts of 16/s",
		About: "Open-loop arrivals at 2 requests/s (half the provider's capacity) with a burst of 16/s " +
			"for 10 s every 60 s. A burst brings about 140 extra requests at once. " +
			"Watch how each limiter absorbs it: provider 429s, Sluice's queue, time to first token.",
		Duration: 180 * sec,
		Sim:      sim.Config{Schedule: []sim.Step{{Capacity: 40}}},
		Load: Load{
			RateAt: func(t time.Duration) float64 {
				if m := t % (60 * sec); m >= 30*sec && m < 40*sec {
					return 16
				}
				return 2
			},
			MaxRate: 16,
			Prompt:  stdPrompt, Output: stdOutput,
		},
		Ceiling: 80,
		Phases:  []Phase{{"all", 0, 180 * sec}},
	}
}

// NoisyTTFT has a provider whose time to first token varies a lot from
// request to request.
func NoisyTTFT() *Scenario {
	return &Scenario{
		Name:  "noisy-ttft",
		Title: "Noisy time to first token (jitter sigma 0.8)",
		About: "Same capacity (40) and traffic as the capacity step's first phase, but every request's " +
			"time to first token is multiplied by a lognormal factor with sigma 0.8 instead of 0.3 " +
			"(the 90th percentile is 2.8x the median). A delay-based limiter must not mistake noise for " +
			"congestion: its limit should stay near the capacity.",
		Duration: 180 * sec,
		Sim:      sim.Config{Schedule: []sim.Step{{Capacity: 40}}, JitterSigma: 0.8},
		Load:     stdLoad,
		Ceiling:  50,
		Phases:   []Phase{{"all", 0, 180 * sec}},
	}
}

// GradualSlowdown has a provider whose capacity erodes step by step and
// which queues instead of refusing: no 429s at all.
func GradualSlowdown() *Scenario {
	steps := []sim.Step{{Capacity: 40}}
	for i := 1; i <= 12; i++ {
		steps = append(steps, sim.Step{At: 40*sec + time.Duration(i-1)*8*sec, Capacity: 40 - 2*i})
	}
	return &Scenario{
		Name:  "gradual-slowdown",
		Title: "Gradual slowdown without 429s (capacity 40 → 16, −2 every 8 s)",
		About: "The provider never refuses (no 429s: its internal queue is unbounded) while its capacity " +
			"erodes by 2 every 8 s from 40 (at 40 s) to 16 (at 128 s), then holds. The only signal is a growing time to first token. " +
			"A loss-only limiter (aimd) sees nothing; a static limit piles requests into the provider's queue.",
		Duration: 240 * sec,
		Sim:      sim.Config{Schedule: steps, OverloadFactor: -1},
		Load:     stdLoad,
		Ceiling:  50,
		Phases:   []Phase{{"C=40", 0, 40 * sec}, {"falling", 40 * sec, 128 * sec}, {"C=16", 128 * sec, 240 * sec}},
	}
}

// DecodeBound has a provider that admits everything and slows every stream
// as load grows: time to first token stays flat, tokens per second fall.
func DecodeBound() *Scenario {
	return &Scenario{
		Name:  "decode-bound",
		Title: "Decode-bound provider: flat TTFT, token rate falling with load",
		About: "The provider runs every request at once (capacity 200, never queues or refuses) but each stream " +
			"decodes slower the more run: inter-token latency is 20 ms x (1 + running/40), so 25 tokens/s per " +
			"stream at 40 running and 14 tokens/s at 100. Time to first token does not move. More concurrency " +
			"always buys more total tokens/s here, at the cost of every stream's speed, so the question is " +
			"whether a service level holds: the adaptive variants are configured with `min_token_rate: 25`, and " +
			"the oracle runs 40, the concurrency at which streams decode at exactly 25 tokens/s. Compare ITL " +
			"(40 ms = 25 tokens/s) rather than completions: fixed @ ceiling completes more streams, each decoding " +
			"at 14 tokens/s.",
		Duration:   180 * sec,
		Sim:        sim.Config{Schedule: []sim.Step{{Capacity: 200}}, OverloadFactor: -1, ITLLoad: 5},
		Load:       stdLoad,
		Ceiling:    100,
		Oracle:     []sim.Step{{Capacity: 40}},
		OracleNote: "40: the concurrency at which the provider decodes at the 25 tokens/s floor",
		Tune:       func(l *settings.Limit) { l.MinTokenRate = 25 },
		Phases:     []Phase{{"all", 0, 180 * sec}},
	}
}

// MixedPrompts mixes very short and very long prompts, so that prefill
// time dominates time to first token for some requests.
func MixedPrompts() *Scenario {
	return &Scenario{
		Name:  "mixed-prompts",
		Title: "Mixed prompt sizes (lognormal, mean 4,000 tokens, up to 32,000)",
		About: "Prompts range from a few dozen to 32,000 tokens (a 32k prompt takes 4 s to prefill at 8,000 " +
			"tokens/s), so raw time to first token varies with prompt size, not load. Sluice subtracts the " +
			"estimated prefill time (`prefill_tokens_per_second`) before comparing. Capacity is a constant 40.",
		Duration: 180 * sec,
		Sim:      sim.Config{Schedule: []sim.Step{{Capacity: 40}}},
		Load:     Load{Clients: 200, Think: time.Second, Prompt: load.Dist{Mean: 4000, Sigma: 1.2, Max: 32000}, Output: stdOutput},
		Ceiling:  50,
		Phases:   []Phase{{"all", 0, 180 * sec}},
	}
}

// NonStreaming is the constant-capacity provider with every request asking
// for a whole answer.
func NonStreaming() *Scenario {
	return &Scenario{
		Name:  "non-streaming",
		Title: "Non-streaming requests only (stream: false), capacity 40",
		About: "The constant-capacity provider and the 200 clients of the other scenarios, but every request asks for a whole answer. " +
			"Sluice sees no time to first token, only answers and refusals, so gradient2's delay part has nothing " +
			"to measure: it steps aside (doubling per window up to the ceiling, once answers show the limit in use) " +
			"and the loss part limits the provider, as aimd does. The first feedback is a whole answer, one request " +
			"after the start. The provider refuses beyond 1.5 C = 60, above the ceiling of 50.",
		Duration: 180 * sec,
		Sim:      sim.Config{Schedule: []sim.Step{{Capacity: 40}}},
		Load:     Load{Clients: 200, Think: time.Second, Prompt: stdPrompt, Output: stdOutput, NonStream: true},
		Ceiling:  50,
		Phases:   []Phase{{"all", 0, 180 * sec}},
	}
}

// RateLimited has a provider with a hard requests-per-second limit that
// answers 429 with Retry-After beyond it, well below its concurrency
// capacity.
func RateLimited() *Scenario {
	return &Scenario{
		Name:  "rate-limit",
		Title: "Hard rate limit (3 requests/s) with Retry-After",
		About: "The provider could run 40 streams but accepts at most 3 new requests per second " +
			"(token bucket, burst 3) and answers the rest 429 with `retry-after: 1`. " +
			"Concurrency is not what is scarce here; a concurrency limiter can still stop hammering " +
			"the provider by settling where the rate limit binds, and Sluice honours Retry-After by " +
			"freezing growth. Once refusals come at concurrencies the provider served before (a rate, " +
			"not the concurrency, binds), the adaptive limiters also pace dispatches at the rate the " +
			"provider accepts. The oracle runs 26, the concurrency at which 3 requests/s complete " +
			"(Little's law with the provider's service time at that load, 8.6 s).",
		Duration:   180 * sec,
		Sim:        sim.Config{Schedule: []sim.Step{{Capacity: 40}}, RateLimitRPS: 3, RateLimitBurst: 3},
		Load:       stdLoad,
		Ceiling:    50,
		Oracle:     []sim.Step{{Capacity: 26}},
		OracleNote: "26: Little's law, 3 requests/s x 8.6 s per request at that load",
		Phases:     []Phase{{"all", 0, 180 * sec}},
		// The fifth variant is gradient2 told the provider's rate (rate:
		// rpm 180 over a 1 s window: 3 requests/s, at most 3 at once): its
		// bucket paces requests at the provider's rate instead of learning
		// it from refusals.
		Variants: append(slices.Clone(Variants), Variant{
			Name: "gradient2-rate", Label: "gradient2 + rate: rpm 180, request_window 1s", Algorithm: settings.AlgorithmGradient2, Color: "#9467bd",
			Provider: func(p *config.Provider) { p.Rate.RPM, p.Rate.RequestWindow = 180, time.Second },
		}),
		Targets: rateLimitTargets,
	}
}

// rateLimitTargets checks the target for the rate-limit scenario:
// at least 97% of the oracle's completions, for gradient2 alone and for
// gradient2 with the provider's rate configured.
func rateLimitTargets(r *Result) []Check {
	or := r.Variant("oracle")
	if or == nil || or.Summary.OK == 0 {
		return nil
	}
	var checks []Check
	for _, name := range []string{"gradient2", "gradient2-rate"} {
		v := r.Variant(name)
		if v == nil {
			continue
		}
		pct := 100 * float64(v.Summary.OK) / float64(or.Summary.OK)
		checks = append(checks, Check{
			Target: v.Variant.Label + ": completed requests at least 97% of the oracle",
			Got:    fmt.Sprintf("%d vs %d (%.1f%%), %d upstream 429s", v.Summary.OK, or.Summary.OK, pct, v.UpstreamRejected),
			Met:    pct >= 97,
		})
	}
	return checks
}

// ProviderQuota has a provider that enforces an account quota of 60
// requests and 40,000 tokens per minute and reports what is left in its
// rate-limit headers, in OpenAI's style or Anthropic's (style).
func ProviderQuota(style string) *Scenario {
	follow := Variant{Name: "follow", Label: "gradient2, headers followed (default)", Algorithm: settings.AlgorithmGradient2, Color: "#1f77b4"}
	ignore := Variant{Name: "ignore", Label: "gradient2, headers ignored", Algorithm: settings.AlgorithmGradient2, Color: "#d62728",
		Provider: func(p *config.Provider) { p.Rate.ProviderHeaders = "ignore" }}
	told := Variant{Name: "configured", Label: "gradient2, rate: rpm 60, tpm 40000", Algorithm: settings.AlgorithmGradient2, Color: "#2ca02c",
		Provider: func(p *config.Provider) { p.Rate.ProviderHeaders, p.Rate.RPM, p.Rate.TPM = "ignore", 60, 40000 }}
	return &Scenario{
		Name:  "quota-" + style,
		Title: "Provider quota (60 requests, 40,000 tokens per minute) reported in " + style + "-style headers",
		About: "The provider could run 40 streams but its account allows 60 requests and 40,000 tokens per minute " +
			"(prompt plus max_tokens, taken at admission, as OpenAI counts), refuses beyond with 429 and retry-after, and reports " +
			"what is left on every answer (" + style + "-style rate-limit headers). Each request needs about 1,250 tokens, so the " +
			"token quota binds at about 32 requests per minute. Nothing about the quota is configured in Sluice: with " +
			"the provider's headers followed (the default), Sluice learns the quota from the first answer and paces requests with it. " +
			"Runs in real time: the quota's minute is a real minute. The first minute is a warm-up (a full quota allows a burst).",
		Duration:   180 * sec,
		TimeScale:  1,
		NoCapacity: "an account's quota is not a capacity",
		Sim: sim.Config{Schedule: []sim.Step{{Capacity: 40}}, OverloadFactor: -1,
			Quota: sim.Quota{RPM: 60, TPM: 40000, Headers: style}},
		Load:     Load{Clients: 20, Think: 2 * time.Second, Prompt: stdPrompt, Output: stdOutput},
		Ceiling:  50,
		Phases:   []Phase{{"warm-up", 0, 60 * sec}, {"measured", 60 * sec, 180 * sec}},
		Variants: []Variant{follow, ignore, told},
		Targets:  quotaTargets,
	}
}

// quotaTargets checks the targets for a provider that reports its
// quota: with the headers followed and nothing configured, upstream 429s
// under 1% of the requests sent, and a throughput within 5% of the quota
// after the first minute.
func quotaTargets(r *Result) []Check {
	v := r.Variant("follow")
	if v == nil || len(r.Samples) == 0 {
		return nil
	}
	sent := v.Provider.Requests
	pct := 0.0
	if sent > 0 {
		pct = 100 * float64(v.UpstreamRejected) / float64(sent)
	}
	perMin := quotaRate(r, "follow", 60*sec)
	tpm := float64(r.Scenario.Sim.Quota.TPM)
	return []Check{
		{
			Target: "upstream 429s under 1% of the requests sent, with nothing configured",
			Got:    fmt.Sprintf("%d of %d (%.2f%%)", v.UpstreamRejected, sent, pct),
			Met:    sent > 0 && pct < 1,
		},
		{
			Target: "throughput within 5% of the quota after the first minute",
			Got:    fmt.Sprintf("%.0f tokens/min of %.0f (%.1f%%)", perMin, tpm, 100*perMin/tpm),
			Met:    perMin >= 0.95*tpm && perMin <= 1.05*tpm,
		},
	}
}

// quotaRate is the tokens per model minute the provider's quota admitted
// for the named variant, from model time from to the last sample.
func quotaRate(r *Result, name string, from time.Duration) float64 {
	i := slices.IndexFunc(r.Variants, func(v *VariantResult) bool { return v.Variant.Name == name })
	if i < 0 {
		return 0
	}
	var a, b *Sample
	for k := range r.Samples {
		smp := &r.Samples[k]
		if a == nil && smp.T >= from {
			a = smp
		}
		b = smp
	}
	if a == nil || b == nil || b.T <= a.T {
		return 0
	}
	return float64(b.V[i].QuotaTokens-a.V[i].QuotaTokens) / (b.T - a.T).Minutes()
}
