package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/settings"
)

func validConfig() *Config {
	c := Default()
	p := DefaultProvider()
	p.Name = "openai"
	p.Upstream = "https://api.openai.com"
	p.Match.PathPrefix = "/openai"
	c.Providers = []Provider{p}
	return c
}

func TestValidateProgrammatic(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if err := Default().Validate(); err == nil || err.Error() != "providers: at least one provider is required" {
		t.Errorf("Default().Validate() = %v", err)
	}

	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   []string // exact lines of the error, in order
	}{
		{"ceiling", func(c *Config) { c.Providers[0].Limit.Ceiling = 0 },
			[]string{"providers[0].limit.ceiling: must be between 1 and 100000, got 0"}},
		{"several", func(c *Config) {
			c.Listen = ""
			c.Providers[0].Timeouts.Total = time.Second
			c.Providers[0].Limit.LongWindow = 0
			c.Providers = append(c.Providers, c.Providers[0])
		}, []string{
			"listen: required (host:port)",
			"providers[0].timeouts.total: must be at least first_token (1m), got 1s",
			"providers[0].limit.long_window: must be between 10 and 100000, got 0",
			"providers[1].timeouts.total: must be at least first_token (1m), got 1s",
			"providers[1].limit.long_window: must be between 10 and 100000, got 0",
			`providers[1].name: duplicate provider name "openai" (also providers[0])`,
			`providers[1].match.path_prefix: "/openai" is already used by providers[0] (openai)`,
		}},
		{"zero-value provider", func(c *Config) { c.Providers = []Provider{{Name: "x", Upstream: "http://x", Match: Match{Host: "x"}}} }, []string{
			`providers[0].dialect: must be "auto", "openai" or "anthropic", got ""`,
			`providers[0].auth: must be "bearer" or "x-api-key", got ""`,
			"providers[0].timeouts.connect: must be between 1ms and 5m, got 0s",
			"providers[0].timeouts.first_token: must be between 1ms and 1h, got 0s",
			"providers[0].timeouts.idle: must be between 1ms and 1h, got 0s",
			"providers[0].timeouts.total: must be between 1ms and 24h, got 0s",
			`providers[0].limit.algorithm: must be "gradient2", "aimd" or "fixed", got ""`,
			"providers[0].limit.ceiling: must be between 1 and 100000, got 0",
			"providers[0].limit.window: must be between 100ms and 1m, got 0s",
			"providers[0].limit.window_samples: must be between 1 and 10000, got 0",
			"providers[0].limit.smoothing: must be greater than 0 and at most 1, got 0",
			"providers[0].limit.long_window: must be between 10 and 100000, got 0",
			"providers[0].limit.backoff: must be at least 0.5 and less than 1, got 0",
			"providers[0].queue.classes: must list between 1 and 8 classes, got 0",
			"providers[0].queue.max_tenants: must be between 1 and 1000000, got 0",
			"providers[0].queue.saturation_ttft_ratio: must be between 1.1 and 100, got 0",
			"providers[0].rate.default_max_output_tokens: must be between 1 and 10000000, got 0",
			`providers[0].rate.provider_headers: must be "follow" or "ignore", got ""`,
			"providers[0].rate.max_accounts: must be between 1 and 1000000, got 0",
			`providers[0].rate.per_client.key: must be "api_key" or "header", got ""`,
			"providers[0].rate.per_client.max_keys: must be between 1 and 1000000, got 0",
			"providers[0].retries.max_attempts: must be between 1 (no retries) and 10, got 0",
			"providers[0].retries.budget_window: must be between 1s and 10m, got 0s",
			"providers[0].retries.backoff_base: must be between 1ms and 1m, got 0s",
			"providers[0].breaker.min_requests: must be between 1 and 1000000, got 0",
			"providers[0].breaker.window: must be between 1s and 10m, got 0s",
			"providers[0].breaker.open_time: must be between 100ms and 1h, got 0s",
			"providers[0].breaker.quota_open_time: must be between 1s and 24h, got 0s",
			"providers[0].breaker.half_open_probes: must be between 1 and 1000, got 0",
		}},
		{"hand-built upstreams", func(c *Config) {
			c.Providers[0].Upstream = ""
			c.Providers[0].Upstreams = []Upstream{
				{Upstream: settings.Upstream{Weight: 1}, URL: "https://a.example.com/"},
				{Upstream: settings.Upstream{Name: "b", Weight: 1}, URL: "https://b.example.com", APIKeyEnv: "OPENAI_API_KEY"},
			}
		}, []string{
			"providers[0].upstreams[0].name: required",
			`providers[0].upstreams[0].url: must not end with "/"`,
			"providers[0].upstreams[1].api_key_env: APIKey is empty: environment variable OPENAI_API_KEY was not resolved",
		}},
		{"neither upstream nor upstreams", func(c *Config) { c.Providers[0].Upstream = "" },
			[]string{"providers[0].upstream: required (an absolute http:// or https:// URL)"}},
		{"non-canonical forms Parse would fix", func(c *Config) {
			c.Providers[0].Upstream = "https://api.openai.com/"
			c.Providers[0].Match.Host = "API.openai.com"
		}, []string{
			`providers[0].upstream: must not end with "/"`,
			`providers[0].match.host: must be lower case, got "API.openai.com"`,
		}},
		{"bracketed ipv6 host", func(c *Config) { c.Providers[0].Match.Host = "[::1]" },
			[]string{`providers[0].match.host: must be an IPv6 address without brackets, got "[::1]"`}},
		{"api key not resolved", func(c *Config) { c.Providers[0].APIKeyEnv = "OPENAI_API_KEY" },
			[]string{"providers[0].api_key_env: APIKey is empty: environment variable OPENAI_API_KEY was not resolved"}},
		{"api key with newline", func(c *Config) { c.Providers[0].APIKey = "sk-TOPSECRET\n" },
			[]string{"providers[0]: APIKey holds control characters; they cannot be sent in a header"}},
		{"nan ratio", func(c *Config) { c.Tracing.SampleRatio = -0.5 },
			[]string{"tracing.sample_ratio: must be between 0 and 1 (or -1 to use the environment), got -0.5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mutate(c)
			err := c.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			if got := err.Error(); got != strings.Join(tc.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(tc.want, "\n"))
			}
			for _, e := range unjoin(err) {
				var fe *FieldError
				if !errors.As(e, &fe) || fe.File != "" || fe.Line != 0 {
					t.Errorf("%q: want a *FieldError without file or line", e)
				}
			}
		})
	}
}

func TestValidateAcceptsResolvedKey(t *testing.T) {
	c := validConfig()
	c.Providers[0].APIKeyEnv = "OPENAI_API_KEY"
	c.Providers[0].APIKey = "sk-x"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// A key set directly, without api_key_env, is fine too.
	c.Providers[0].APIKeyEnv = ""
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateDoesNotMutate(t *testing.T) {
	c := validConfig()
	c.Providers[0].APIKeyEnv = "OPENAI_API_KEY"
	c.Providers[0].APIKey = "sk-x"
	_ = c.Validate()
	if c.Providers[0].APIKey != "sk-x" {
		t.Error("Validate changed APIKey")
	}
}

func TestFieldErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    FieldError
		want string
	}{
		{FieldError{File: "f.yaml", Line: 3, Path: "a.b", Msg: "bad"}, "f.yaml:3: a.b: bad"},
		{FieldError{File: "f.yaml", Msg: "bad"}, "f.yaml: bad"},
		{FieldError{Line: 3, Path: "a", Msg: "bad"}, "line 3: a: bad"},
		{FieldError{Path: "a", Msg: "bad"}, "a: bad"},
		{FieldError{Msg: "bad"}, "bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Millisecond: "1ms", 5 * time.Minute: "5m", time.Hour: "1h",
		90 * time.Second: "1m30s", 24 * time.Hour: "24h", time.Hour + time.Second: "1h0m1s",
	} {
		if got := settings.FormatDuration(d); got != want {
			t.Errorf("settings.FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
