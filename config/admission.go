package config

import "time"

// The blocks of a provider beyond its concurrency limit: rate limits,
// retries, circuit breaking and several upstreams. Their defaults and
// ranges are decided by the admission code (adaptive) and reach this
// package through [Rules], like [Limit]'s; the ones quoted below are
// documentation.

// Rate configures a provider's rate limits (rate:): its own per-minute
// limits, the output a request reserves when it names no maximum, whether
// the provider's rate-limit headers are followed, and per-client limits.
type Rate struct {
	// RPM limits requests per minute; 0 (default) is no limit. 0..1e8.
	RPM int `yaml:"rpm"`
	// TPM limits input plus output tokens per minute; 0 (default) is no
	// limit. 0..1e10.
	TPM int `yaml:"tpm"`
	// InputTPM limits input (prompt) tokens per minute; 0 is no limit.
	InputTPM int `yaml:"input_tpm"`
	// OutputTPM limits output tokens per minute; 0 is no limit.
	OutputTPM int `yaml:"output_tpm"`
	// RequestWindow is the window RPM (the provider's and per client) is
	// counted over: a burst of RPM x RequestWindow / 1m. Default 1m,
	// 100ms..1m.
	RequestWindow time.Duration `yaml:"request_window"`
	// DefaultMaxOutputTokens is what a request that names no max_tokens
	// reserves for its output. Default 1024, 1..10000000.
	DefaultMaxOutputTokens int `yaml:"default_max_output_tokens"`
	// ProviderHeaders is "follow" (default: each upstream's quota is
	// learned from the provider's rate-limit headers) or "ignore".
	ProviderHeaders string `yaml:"provider_headers"`
	// PerClient limits each client on its own.
	PerClient PerClient `yaml:"per_client"`
}

// PerClient configures per-client rate limits (rate.per_client:).
type PerClient struct {
	// Key is where a client's identity comes from: "api_key" (default, the
	// credential it sends) or "header" (the header named by Header).
	Key string `yaml:"key"`
	// Header names the header identifying a client, with key: header.
	Header string `yaml:"header"`
	// RPM, TPM, InputTPM and OutputTPM are each client's per-minute
	// limits; all 0 (default) turns per-client limits off.
	RPM       int `yaml:"rpm"`
	TPM       int `yaml:"tpm"`
	InputTPM  int `yaml:"input_tpm"`
	OutputTPM int `yaml:"output_tpm"`
	// MaxKeys bounds the clients tracked at once. Default 10000, 1..1000000.
	MaxKeys int `yaml:"max_keys"`
}

// Retries configures a provider's retries (retries:).
type Retries struct {
	// MaxAttempts is the most upstream attempts per request, the first
	// included. Default 2, 1..10; 1 turns retries off.
	MaxAttempts int `yaml:"max_attempts"`
	// BudgetRatio caps retries at this fraction of recent requests.
	// Default 0.2, 0..1.
	BudgetRatio float64 `yaml:"budget_ratio"`
	// MinPerSecond retries per second are allowed whatever the ratio.
	// Default 3, 0..10000.
	MinPerSecond float64 `yaml:"min_per_second"`
	// BudgetWindow is how far back "recent" goes. Default 10s, 1s..10m.
	BudgetWindow time.Duration `yaml:"budget_window"`
	// BackoffBase and BackoffMax bound the exponential backoff with full
	// jitter. Defaults 250ms (1ms..1m) and 5s (backoff_base..10m).
	BackoffBase time.Duration `yaml:"backoff_base"`
	BackoffMax  time.Duration `yaml:"backoff_max"`
	// MaxRetryAfter is the longest Retry-After waited out before a retry.
	// Default 10s, 0..10m.
	MaxRetryAfter time.Duration `yaml:"max_retry_after"`
}

// Breaker configures the circuit breaker of each upstream (breaker:).
type Breaker struct {
	// ConsecutiveFailures opens the breaker after that many failures in a
	// row. Default 5, 0 (off)..10000.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// FailureRatio opens it when this fraction of the attempts in Window
	// failed. Default 0.5, 0 (off)..1.
	FailureRatio float64 `yaml:"failure_ratio"`
	// MinRequests is the fewest attempts in Window for the ratio to count.
	// Default 20, 1..1000000.
	MinRequests int `yaml:"min_requests"`
	// Window is how far back the ratio looks. Default 10s, 1s..10m.
	Window time.Duration `yaml:"window"`
	// OpenTime is how long an open breaker sends nothing. Default 15s,
	// 100ms..1h.
	OpenTime time.Duration `yaml:"open_time"`
	// QuotaOpenTime is how long it stays open after a quota or billing
	// error. Default 5m, 1s..24h.
	QuotaOpenTime time.Duration `yaml:"quota_open_time"`
	// HalfOpenProbes is how many probes go through at once when the open
	// time is over, and how many must succeed to close it. Default 3,
	// 1..1000.
	HalfOpenProbes int `yaml:"half_open_probes"`
}

// Upstream is one of several upstreams of a provider (upstreams:), e.g.
// two API keys, two regions, Azure deployments or vLLM replicas. The
// provider's dialect, auth, timeouts and limit apply to each; headers are
// merged (the upstream's win) and its api_key_env replaces the
// provider's.
type Upstream struct {
	// Name identifies the upstream in metrics and the status page, and
	// carries its learned state across reloads. [a-z0-9_-]{1,64}, unique
	// within the provider; default its index in the list ("0", "1", ...,
	// set by [Parse]).
	Name string `yaml:"name"`
	// URL is the base URL, with the same rules as [Provider.Upstream].
	URL string `yaml:"url"`
	// APIKeyEnv names the environment variable holding this upstream's
	// key; empty: the provider's api_key_env, if any.
	APIKeyEnv string `yaml:"api_key_env"`
	// Headers are set on every request to this upstream, over the
	// provider's.
	Headers map[string]string `yaml:"headers"`
	// Weight scales the upstream's share of traffic. Default 1, 1..1000.
	Weight int `yaml:"weight"`
	// Ceiling caps the requests in flight to this upstream; 0 (default)
	// leaves it to its adaptive limit under the provider's ceiling.
	Ceiling int `yaml:"ceiling"`
	// Rate is this upstream's known quota per minute, counted as providers
	// count it; 0 leaves a dimension to the provider's headers.
	Rate UpstreamRate `yaml:"rate"`
	// APIKey is the key read from APIKeyEnv at load time.
	APIKey Secret `yaml:"-"`
}

// UpstreamRate is an upstream's known quota (upstreams[].rate:).
type UpstreamRate struct {
	RPM       int `yaml:"rpm"`
	TPM       int `yaml:"tpm"`
	InputTPM  int `yaml:"input_tpm"`
	OutputTPM int `yaml:"output_tpm"`
}
