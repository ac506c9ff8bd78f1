package settings

import (
	"strings"
	"testing"
	"time"
)

func problemParams(ps []Problem) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

// TestDefaultsValid: the defaults pass their own checks, completed or
// not.
func TestDefaultsValid(t *testing.T) {
	t.Parallel()
	none := func(string) bool { return false }
	for name, ps := range map[string][]Problem{
		"limit":           DefaultLimit().Problems(),
		"limit completed": DefaultLimit().Complete(none).Problems(),
		"queue":           DefaultQueue().Problems(),
		"queue completed": DefaultQueue().Complete(none).Problems(),
		"fleet":           DefaultFleet().Problems(),
		"rate":            DefaultRate().Problems(),
		"retries":         DefaultRetries().Problems(),
		"breaker":         DefaultBreaker().Problems(),
		"upstream":        DefaultUpstream().Problems(),
	} {
		if len(ps) > 0 {
			t.Errorf("default %s settings invalid:\n%s", name, problemParams(ps))
		}
	}
}

// TestProblems: every out-of-range value is reported,
// keyed by its YAML key, all at once.
func TestProblems(t *testing.T) {
	t.Parallel()
	rate := DefaultRate()
	rate.PerMinute = PerMinute{RPM: -1, TPM: MaxTPM + 1, InputTPM: -2, OutputTPM: -3}
	rate.DefaultMaxOutputTokens = 0
	rate.ProviderHeaders = "obey"
	rate.PerClient = PerClient{Key: ClientKeyHeader, Header: "bad header", PerMinute: PerMinute{RPM: MaxRPM + 1}, MaxKeys: 0}
	retry := Retries{MaxAttempts: 11, BudgetRatio: 1.5, MinPerSecond: -1, BudgetWindow: 0,
		BackoffBase: 2 * time.Minute, BackoffMax: time.Minute, MaxRetryAfter: -time.Second}
	brk := Breaker{ConsecutiveFailures: -1, FailureRatio: 2, MinRequests: 0, Window: 0,
		OpenTime: 0, QuotaOpenTime: 0, HalfOpenProbes: 0}
	up := Upstream{Weight: 0, Ceiling: -1, Rate: PerMinute{TPM: -1}}
	for _, c := range []struct {
		name string
		ps   []Problem
		want []string
	}{
		{"rate", rate.Problems(), []string{"rpm", "tpm", "input_tpm", "output_tpm", "default_max_output_tokens",
			"provider_headers", "per_client.header", "per_client.rpm", "per_client.max_keys"}},
		{"retries", retry.Problems(), []string{"max_attempts", "budget_ratio", "min_per_second", "budget_window",
			"backoff_base", "backoff_max", "max_retry_after"}},
		{"breaker", brk.Problems(), []string{"consecutive_failures", "failure_ratio", "min_requests", "window",
			"open_time", "quota_open_time", "half_open_probes"}},
		{"upstream", up.Problems(), []string{"weight", "ceiling", "rate.tpm"}},
	} {
		var got []string
		for _, p := range c.ps {
			got = append(got, p.Key)
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s: problems with %v, want %v:\n%s", c.name, got, c.want, problemParams(c.ps))
		}
	}
	// key: api_key takes no header; an unknown key source is named.
	r := DefaultRate()
	r.PerClient.Header = "X-Team"
	if ps := r.Problems(); len(ps) != 1 || ps[0].Key != "per_client.header" {
		t.Errorf("header with key api_key: %v", ps)
	}
	r.PerClient.Key, r.PerClient.Header = "ip", ""
	if ps := r.Problems(); len(ps) != 1 || ps[0].String() != `per_client.key: must be "api_key" or "header", got "ip"` {
		t.Errorf("unknown key source: %v", ps)
	}
}
