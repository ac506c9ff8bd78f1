package settings

import "time"

// Rate is a provider's rate limits (the rate: block): its own per-minute
// limits, the output a request reserves when it names no maximum, whether
// the provider's rate-limit headers are followed, and per-client limits.
type Rate struct {
	// PerMinute are the provider's own limits: Sluice's policy for
	// everything sent to the provider, settled exactly from metered usage.
	// 0 (the default) leaves a dimension unlimited.
	PerMinute `yaml:",inline"`
	// RequestWindow is the window requests are counted over, for the
	// provider's rpm and each client's: a burst of rpm x RequestWindow /
	// 1m (a provider that enforces its requests per minute over a few
	// seconds refuses a minute's burst). Default 1m, 100ms..1m.
	RequestWindow time.Duration `yaml:"request_window"`
	// DefaultMaxOutputTokens is the output a request that names no
	// max_tokens (or max_completion_tokens / max_output_tokens) reserves.
	// Default 1024, 1..10000000.
	DefaultMaxOutputTokens int `yaml:"default_max_output_tokens"`
	// ProviderHeaders is HeadersFollow (default): each upstream's quota
	// is learned from the provider's x-ratelimit-* /
	// anthropic-ratelimit-* headers; or HeadersIgnore.
	ProviderHeaders string `yaml:"provider_headers"`
	// MaxAccounts bounds how many accounts at the provider each upstream
	// learns quotas for at once: in passthrough mode (no injected key)
	// every client credential is its own account. Default 4096,
	// 1..1000000. An idle account gives its place to a new one; while
	// every place is busy, a new account's requests are not limited by a
	// learned quota (the provider still refuses what it must).
	MaxAccounts int `yaml:"max_accounts"`
	// PerClient limits each client key on its own.
	PerClient PerClient `yaml:"per_client"`
}

// PerMinute are per-minute limits, one per dimension, counted the way
// providers count them; 0 leaves a dimension unlimited.
type PerMinute struct {
	// RPM limits requests per minute. 0..1e8.
	RPM int `yaml:"rpm"`
	// TPM limits input plus output tokens per minute. 0..1e10.
	TPM int `yaml:"tpm"`
	// InputTPM limits input (prompt) tokens per minute. 0..1e10.
	InputTPM int `yaml:"input_tpm"`
	// OutputTPM limits output tokens per minute. 0..1e10.
	OutputTPM int `yaml:"output_tpm"`
}

// Any reports whether any dimension is limited.
func (p PerMinute) Any() bool { return p != PerMinute{} }

// Values of Rate.ProviderHeaders.
const (
	HeadersFollow = "follow"
	HeadersIgnore = "ignore"
)

// PerClient limits each client key (the rate.per_client: block).
type PerClient struct {
	// Key is where a client's key comes from: ClientKeyAPIKey (default,
	// the credential the client sends: Authorization or x-api-key) or
	// ClientKeyHeader (the header named by Header).
	Key string `yaml:"key"`
	// Header names the header that identifies a client when Key is
	// ClientKeyHeader; empty otherwise.
	Header string `yaml:"header"`
	// PerMinute are each client's limits; all 0 (the default) turns
	// per-client limits off. Requests are counted over the rate block's
	// RequestWindow.
	PerMinute `yaml:",inline"`
	// MaxKeys bounds how many client keys are tracked at once. Default
	// 10000, 1..1000000 (about 400 bytes each). When every tracked key is
	// busy, a new key shares one overflow quota of the same limits.
	MaxKeys int `yaml:"max_keys"`
}

// Values of PerClient.Key.
const (
	ClientKeyAPIKey = "api_key"
	ClientKeyHeader = "header"
)

// Bounds of the rate settings.
const (
	MaxRPM           = 100_000_000
	MaxTPM           = 10_000_000_000
	maxClientKeys    = 1_000_000
	maxAccounts      = 1_000_000
	maxDefaultMaxOT  = 10_000_000
	minRequestWindow = 100 * time.Millisecond
	maxRequestWindow = time.Minute // the per-minute limits' own window
)

// DefaultRate returns no limits of Sluice's own, requests counted over a
// minute, provider headers followed (quotas learned for at most 4096
// accounts per upstream), 1024 output tokens reserved for a request that
// names no maximum, and per-client limits off (keyed by API
// key, 10000 keys).
func DefaultRate() Rate {
	return Rate{
		RequestWindow:          time.Minute,
		DefaultMaxOutputTokens: 1024,
		ProviderHeaders:        HeadersFollow,
		MaxAccounts:            4096,
		PerClient:              PerClient{Key: ClientKeyAPIKey, MaxKeys: 10000},
	}
}

// Problems lists every invalid rate setting; Key is the key inside the
// rate: block ("per_client.max_keys").
func (r Rate) Problems() []Problem {
	var ps problems
	ps.perMinute("", r.PerMinute)
	if w := r.RequestWindow; w != 0 && (w < minRequestWindow || w > maxRequestWindow) {
		ps.bad("request_window", "must be between %s and %s, got %s", FormatDuration(minRequestWindow), FormatDuration(maxRequestWindow), FormatDuration(w))
	}
	if n := r.DefaultMaxOutputTokens; n < 1 || n > maxDefaultMaxOT {
		ps.bad("default_max_output_tokens", "must be between 1 and %d, got %d", maxDefaultMaxOT, n)
	}
	switch r.ProviderHeaders {
	case HeadersFollow, HeadersIgnore:
	default:
		ps.bad("provider_headers", "must be %q or %q, got %q", HeadersFollow, HeadersIgnore, r.ProviderHeaders)
	}
	if r.MaxAccounts < 1 || r.MaxAccounts > maxAccounts {
		ps.bad("max_accounts", "must be between 1 and %d, got %d", maxAccounts, r.MaxAccounts)
	}
	c := r.PerClient
	switch c.Key {
	case ClientKeyAPIKey:
		if c.Header != "" {
			ps.bad("per_client.header", "is only used with key: %s", ClientKeyHeader)
		}
	case ClientKeyHeader:
		if !IsToken(c.Header) {
			ps.bad("per_client.header", "must name the header that identifies a client (an HTTP token), got %q", c.Header)
		}
	default:
		ps.bad("per_client.key", "must be %q or %q, got %q", ClientKeyAPIKey, ClientKeyHeader, c.Key)
	}
	ps.perMinute("per_client.", c.PerMinute)
	if c.MaxKeys < 1 || c.MaxKeys > maxClientKeys {
		ps.bad("per_client.max_keys", "must be between 1 and %d, got %d", maxClientKeys, c.MaxKeys)
	}
	return ps
}

// perMinute checks rpm, tpm, input_tpm and output_tpm under prefix.
func (ps *problems) perMinute(prefix string, p PerMinute) {
	check := func(key string, n, hi int) {
		if n < 0 || n > hi {
			ps.bad(prefix+key, "must be between 0 (no limit) and %d, got %d", hi, n)
		}
	}
	check("rpm", p.RPM, MaxRPM)
	check("tpm", p.TPM, MaxTPM)
	check("input_tpm", p.InputTPM, MaxTPM)
	check("output_tpm", p.OutputTPM, MaxTPM)
}
