package config

import (
	"fmt"
	"time"
)

// testRules stand in for the limit and queue rules the binary passes
// (proxy.ConfigRules, from adaptive): the same defaults and the same checks
// for the keys these tests exercise. config may not import adaptive; the
// proxy package runs every testdata file through the real rules
// (TestConfigRulesOnConfigTestdata) with the same expectations, so this
// stand-in cannot drift from them unnoticed.
var testRules = Rules{
	Limit: BlockRules[Limit]{
		Default: Limit{
			Algorithm: AlgorithmGradient2, Ceiling: 50, Min: 2, Initial: 20,
			Window: 2 * time.Second, WindowSamples: 5, Smoothing: 0.5, LongWindow: 100,
			Backoff: 0.9, Cooldown: 2 * time.Second, PrefillRate: 8000, Fleet: "shared",
		},
		Complete: func(l Limit, set func(string) bool) Limit {
			if l.Ceiling < 1 {
				return l
			}
			if !set("min") {
				l.Min = min(2, l.Ceiling)
			}
			if !set("initial") {
				l.Initial = min(20, l.Ceiling)
				if l.Min >= 1 && l.Min <= l.Ceiling {
					l.Initial = max(l.Initial, l.Min)
				}
			}
			return l
		},
		Check: func(l Limit) []Issue {
			var is []Issue
			bad := func(k, f string, a ...any) { is = append(is, Issue{k, fmt.Sprintf(f, a...)}) }
			switch l.Algorithm {
			case AlgorithmGradient2, AlgorithmAIMD, AlgorithmFixed:
			default:
				bad("algorithm", `must be "gradient2", "aimd" or "fixed", got %q`, l.Algorithm)
			}
			if l.Ceiling < 1 || l.Ceiling > 100000 {
				bad("ceiling", "must be between 1 and 100000, got %d", l.Ceiling)
			} else if l.Min < 1 || l.Min > l.Ceiling {
				bad("min", "must be between 1 and ceiling (%d), got %d", l.Ceiling, l.Min)
			} else if l.Initial < l.Min || l.Initial > l.Ceiling {
				bad("initial", "must be between min (%d) and ceiling (%d), got %d", l.Min, l.Ceiling, l.Initial)
			}
			if t := l.TTFTTarget; t != 0 && (t < time.Millisecond || t > 10*time.Minute) {
				bad("ttft_target", "must be 0 (learn the baseline) or between 1ms and 10m, got %s", fmtDur(t))
			}
			if r := l.MinTokenRate; !(r >= 0 && r <= 100000) {
				bad("min_token_rate", "must be between 0 and 100000, got %v", r)
			}
			if l.Window < 100*time.Millisecond || l.Window > time.Minute {
				bad("window", "must be between 100ms and 1m, got %s", fmtDur(l.Window))
			}
			if l.WindowSamples < 1 || l.WindowSamples > 10000 {
				bad("window_samples", "must be between 1 and 10000, got %d", l.WindowSamples)
			}
			if !(l.Smoothing > 0 && l.Smoothing <= 1) {
				bad("smoothing", "must be greater than 0 and at most 1, got %v", l.Smoothing)
			}
			if l.LongWindow < 10 || l.LongWindow > 100000 {
				bad("long_window", "must be between 10 and 100000, got %d", l.LongWindow)
			}
			if !(l.Backoff >= 0.5 && l.Backoff < 1) {
				bad("backoff", "must be at least 0.5 and less than 1, got %v", l.Backoff)
			}
			if l.Cooldown < 0 || l.Cooldown > 10*time.Minute {
				bad("cooldown", "must be between 0s and 10m, got %s", fmtDur(l.Cooldown))
			}
			if r := l.PrefillRate; r != 0 && !(r >= 1 && r <= 1e7) {
				bad("prefill_tokens_per_second", "must be 0 (no normalisation) or between 1 and 10000000, got %v", r)
			}
			if l.Fleet != "" && l.Fleet != "shared" && l.Fleet != FleetStrict {
				bad("fleet", `must be "shared" or "strict", got %q`, l.Fleet)
			}
			return is
		},
	},
	Queue: BlockRules[Queue]{
		Default: Queue{
			MaxWaiting: 200, MaxWait: 10 * time.Second,
			Classes: []QueueClass{
				{Name: "interactive", MaxShare: 1, SaturatedShare: 1},
				{Name: "standard", MaxShare: 1, SaturatedShare: 1},
				{Name: "batch", MaxShare: 0.8, SaturatedShare: 0.25},
			},
			DefaultClass: "standard", ClassHeader: "X-Sluice-Class", DeadlineHeader: "X-Sluice-Max-Wait",
			RetryHeaders: []string{"x-stainless-retry-count"}, MaxTenants: 1000,
			SaturationTTFTRatio: 2, SaturationHold: 10 * time.Second,
		},
		Complete: func(q Queue, set func(string) bool) Queue {
			if !set("classes") {
				return q
			}
			q.Classes = append([]QueueClass(nil), q.Classes...)
			for i := range q.Classes {
				key := fmt.Sprintf("classes[%d].", i)
				if !set(key + "max_share") {
					q.Classes[i].MaxShare = 1
				}
				if !set(key + "saturated_share") {
					q.Classes[i].SaturatedShare = q.Classes[i].MaxShare
				}
			}
			return q
		},
		Check: func(q Queue) []Issue {
			var is []Issue
			if q.MaxWaiting < 0 || q.MaxWaiting > 1000000 {
				is = append(is, Issue{"max_waiting", fmt.Sprintf("must be between 0 and 1000000, got %d", q.MaxWaiting)})
			}
			if q.MaxWait < 0 || q.MaxWait > 10*time.Minute {
				is = append(is, Issue{"max_wait", fmt.Sprintf("must be between 0s and 10m, got %s", fmtDur(q.MaxWait))})
			}
			return is
		},
	},
	Cluster: BlockRules[Cluster]{
		Default: Cluster{KeyPrefix: DefaultClusterKeyPrefix, Heartbeat: time.Second, LeaseTTL: 10 * time.Second, ExpectedReplicas: 2},
		Check: func(c Cluster) []Issue {
			var is []Issue
			hbOK := c.Heartbeat >= 100*time.Millisecond && c.Heartbeat <= 10*time.Second
			if !hbOK {
				is = append(is, Issue{"heartbeat", fmt.Sprintf("must be between 100ms and 10s, got %s", fmtDur(c.Heartbeat))})
			}
			switch {
			case c.LeaseTTL < time.Second || c.LeaseTTL > 5*time.Minute:
				is = append(is, Issue{"lease_ttl", fmt.Sprintf("must be between 1s and 5m, got %s", fmtDur(c.LeaseTTL))})
			case hbOK && c.LeaseTTL < 3*c.Heartbeat:
				is = append(is, Issue{"lease_ttl", fmt.Sprintf("must be at least 3 heartbeats (%s), got %s", fmtDur(3*c.Heartbeat), fmtDur(c.LeaseTTL))})
			}
			if c.ExpectedReplicas < 1 || c.ExpectedReplicas > 10000 {
				is = append(is, Issue{"expected_replicas", fmt.Sprintf("must be between 1 and 10000, got %d", c.ExpectedReplicas)})
			}
			return is
		},
	},
}

// Stand-ins for the rate, retries, breaker and upstream rules (adaptive's
// RateSettings, RetrySettings, BreakerSettings and UpstreamSettings): the
// same defaults, and the checks the testdata files exercise.
func init() {
	testRules.Rate = BlockRules[Rate]{
		Default: Rate{RequestWindow: time.Minute, DefaultMaxOutputTokens: 1024, ProviderHeaders: "follow", PerClient: PerClient{Key: "api_key", MaxKeys: 10000}},
		Check: func(r Rate) []Issue {
			var is []Issue
			bad := func(k, f string, a ...any) { is = append(is, Issue{k, fmt.Sprintf(f, a...)}) }
			if r.RPM < 0 || r.RPM > 100000000 {
				bad("rpm", "must be between 0 (no limit) and 100000000, got %d", r.RPM)
			}
			if r.TPM < 0 || r.TPM > 10000000000 {
				bad("tpm", "must be between 0 (no limit) and 10000000000, got %d", r.TPM)
			}
			if r.ProviderHeaders != "follow" && r.ProviderHeaders != "ignore" {
				bad("provider_headers", `must be "follow" or "ignore", got %q`, r.ProviderHeaders)
			}
			switch r.PerClient.Key {
			case "api_key":
			case "header":
				if r.PerClient.Header == "" {
					bad("per_client.header", `must name the header that identifies a client (an HTTP token), got ""`)
				}
			default:
				bad("per_client.key", `must be "api_key" or "header", got %q`, r.PerClient.Key)
			}
			if r.PerClient.MaxKeys < 1 || r.PerClient.MaxKeys > 1000000 {
				bad("per_client.max_keys", "must be between 1 and 1000000, got %d", r.PerClient.MaxKeys)
			}
			return is
		},
	}
	testRules.Retries = BlockRules[Retries]{
		Default: Retries{MaxAttempts: 2, BudgetRatio: 0.2, MinPerSecond: 3, BudgetWindow: 10 * time.Second,
			BackoffBase: 250 * time.Millisecond, BackoffMax: 5 * time.Second, MaxRetryAfter: 10 * time.Second},
		Check: func(r Retries) []Issue {
			var is []Issue
			if r.MaxAttempts < 1 || r.MaxAttempts > 10 {
				is = append(is, Issue{"max_attempts", fmt.Sprintf("must be between 1 (no retries) and 10, got %d", r.MaxAttempts)})
			}
			if !(r.BudgetRatio >= 0 && r.BudgetRatio <= 1) {
				is = append(is, Issue{"budget_ratio", fmt.Sprintf("must be between 0 and 1, got %v", r.BudgetRatio)})
			}
			if r.BackoffMax < r.BackoffBase || r.BackoffMax > 10*time.Minute {
				is = append(is, Issue{"backoff_max", fmt.Sprintf("must be between backoff_base (%s) and 10m, got %s", fmtDur(r.BackoffBase), fmtDur(r.BackoffMax))})
			}
			return is
		},
	}
	testRules.Breaker = BlockRules[Breaker]{
		Default: Breaker{ConsecutiveFailures: 5, FailureRatio: 0.5, MinRequests: 20, Window: 10 * time.Second,
			OpenTime: 15 * time.Second, QuotaOpenTime: 5 * time.Minute, HalfOpenProbes: 3},
		Check: func(b Breaker) []Issue {
			var is []Issue
			if !(b.FailureRatio >= 0 && b.FailureRatio <= 1) {
				is = append(is, Issue{"failure_ratio", fmt.Sprintf("must be between 0 (off) and 1, got %v", b.FailureRatio)})
			}
			if b.OpenTime < 100*time.Millisecond || b.OpenTime > time.Hour {
				is = append(is, Issue{"open_time", fmt.Sprintf("must be between 100ms and 1h, got %s", fmtDur(b.OpenTime))})
			}
			if b.HalfOpenProbes < 1 || b.HalfOpenProbes > 1000 {
				is = append(is, Issue{"half_open_probes", fmt.Sprintf("must be between 1 and 1000, got %d", b.HalfOpenProbes)})
			}
			return is
		},
	}
	testRules.Upstream = BlockRules[Upstream]{
		Default: Upstream{Weight: 1},
		Check: func(u Upstream) []Issue {
			var is []Issue
			if u.Weight < 1 || u.Weight > 1000 {
				is = append(is, Issue{"weight", fmt.Sprintf("must be between 1 and 1000, got %d", u.Weight)})
			}
			if u.Ceiling < 0 || u.Ceiling > 100000 {
				is = append(is, Issue{"ceiling", fmt.Sprintf("must be 0 (the provider's) or between 1 and 100000, got %d", u.Ceiling)})
			}
			if u.Rate.TPM < 0 || u.Rate.TPM > 10000000000 {
				is = append(is, Issue{"rate.tpm", fmt.Sprintf("must be between 0 (no limit) and 10000000000, got %d", u.Rate.TPM)})
			}
			return is
		},
	}
	testRules.SeveralUpstreams = true
}
