package adaptive

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

// TestAdmissionSettingsDefaultsValid: the defaults pass their own checks.
func TestAdmissionSettingsDefaultsValid(t *testing.T) {
	t.Parallel()
	for name, ps := range map[string][]Problem{
		"rate":     DefaultRateSettings().Problems(),
		"retries":  DefaultRetrySettings().Problems(),
		"breaker":  DefaultBreakerSettings().Problems(),
		"upstream": DefaultUpstreamSettings().Problems(),
	} {
		if len(ps) > 0 {
			t.Errorf("default %s settings invalid:\n%s", name, problemParams(ps))
		}
	}
}

// TestAdmissionSettingsProblems: every out-of-range value is reported,
// keyed by its YAML key, all at once.
func TestAdmissionSettingsProblems(t *testing.T) {
	t.Parallel()
	rate := DefaultRateSettings()
	rate.Limits = Limits{Requests: -1, Tokens: MaxTPM + 1, InputTokens: -2, OutputTokens: -3}
	rate.DefaultMaxOutputTokens = 0
	rate.ProviderHeaders = "obey"
	rate.PerClient = ClientRateSettings{Key: ClientKeyHeader, Header: "bad header", Limits: Limits{Requests: MaxRPM + 1}, MaxKeys: 0}
	retry := RetrySettings{MaxAttempts: 11, BudgetRatio: 1.5, MinPerSecond: -1, BudgetWindow: 0,
		BackoffBase: 2 * time.Minute, BackoffMax: time.Minute, MaxRetryAfter: -time.Second}
	brk := BreakerSettings{ConsecutiveFailures: -1, FailureRatio: 2, MinRequests: 0, Window: 0,
		OpenTime: 0, QuotaOpenTime: 0, HalfOpenProbes: 0}
	up := UpstreamSettings{Weight: 0, Ceiling: -1, Limits: Limits{Tokens: -1}}
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
			got = append(got, p.Param)
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s: problems with %v, want %v:\n%s", c.name, got, c.want, problemParams(c.ps))
		}
	}
	// key: api_key takes no header; an unknown key source is named.
	r := DefaultRateSettings()
	r.PerClient.Header = "X-Team"
	if ps := r.Problems(); len(ps) != 1 || ps[0].Param != "per_client.header" {
		t.Errorf("header with key api_key: %v", ps)
	}
	r.PerClient.Key, r.PerClient.Header = "ip", ""
	if ps := r.Problems(); len(ps) != 1 || ps[0].String() != `per_client.key: must be "api_key" or "header", got "ip"` {
		t.Errorf("unknown key source: %v", ps)
	}
}

// TestUpstreamSetRejectsBadSettings: NewUpstreamSet checks everything and
// builds nothing on error; Reconfigure keeps an upstream's state by name.
func TestUpstreamSetSettings(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	good := []UpstreamSettings{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}
	for name, ups := range map[string][]UpstreamSettings{
		"none":      nil,
		"duplicate": {{Name: "a", Weight: 1}, {Name: "a", Weight: 1}},
		"weight":    {{Name: "a", Weight: 0}},
	} {
		if _, err := NewUpstreamSet(clk, DefaultSettings(), DefaultBreakerSettings(), ups, true); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s, err := NewUpstreamSet(clk, DefaultSettings(), DefaultBreakerSettings(), good, true)
	if err != nil {
		t.Fatal(err)
	}
	b := s.Upstreams()[1]
	var a Attempt
	s.Pick(clk.Now(), nil, nil, s.Upstreams()[0], true, &a) // to b
	bad := DefaultBreakerSettings()
	bad.HalfOpenProbes = 0
	if err := s.Reconfigure(DefaultSettings(), bad, good, true); err == nil {
		t.Fatal("bad breaker settings accepted")
	}
	lim := DefaultSettings()
	lim.Initial = 5
	if err := s.Reconfigure(lim, DefaultBreakerSettings(), []UpstreamSettings{{Name: "b", Weight: 2}, {Name: "c", Weight: 1}}, false); err != nil {
		t.Fatal(err)
	}
	ups := s.Upstreams()
	if len(ups) != 2 || ups[0] != b || ups[0].Index() != 0 || ups[0].inflight.Load() != 1 {
		t.Fatalf("b not kept with its attempt in flight: %v", ups)
	}
	if got := ups[0].Stats(clk.Now()).Limit; got != 20 {
		t.Errorf("kept upstream's limit %d, want 20 carried over (not the new initial 5)", got)
	}
	if got := ups[1].Stats(clk.Now()).Limit; got != 5 {
		t.Errorf("new upstream's limit %d, want the initial 5", got)
	}
	if s.Follow() {
		t.Error("provider headers still followed")
	}
	a.Finish(clk.Now(), okResult)
}
