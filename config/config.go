// Package config loads, validates and watches Sluice's YAML configuration.
//
// The format is strict: unknown keys, duplicate keys, values of the wrong
// type and out-of-range settings are all errors, and every error found in a
// file is reported at once (joined with [errors.Join]), each as
//
//	FILE:LINE: FIELD.PATH: message
//
// for example
//
//	sluice.yaml:12: providers[1].limit.ceiling: must be between 1 and 100000, got 0
//
// Each error is a [*FieldError]; use [errors.As] on the individual errors
// (via the joined error's Unwrap() []error) to inspect them.
//
// Defaults are applied before decoding, so an absent key keeps its default
// and an explicit zero stays zero (queue.max_waiting: 0 means "no queue").
// Durations use Go syntax ("5s", "1m30s"). A provider's API key is read from
// the environment variable named by api_key_env at load time and held as a
// [Secret], which never prints.
//
// The blocks of a provider that configure its admission (limit, queue,
// rate, retries, breaker, the limit-related keys of an upstreams: entry) and
// the fleet timings of the cluster block are decoded straight into the
// types of package settings, which hold their defaults and ranges; this
// package applies those defaults before decoding, completes them, and
// reports their problems at their lines like its own.
//
// The package imports nothing else from Sluice but settings.
package config

import (
	"time"

	"github.com/sluicehq/sluice/settings"
)

// Config is a complete, validated Sluice configuration. Values returned by
// [Load] and [Parse] are fully defaulted and valid; treat them as immutable
// and build a new Config instead of editing one that is in use.
type Config struct {
	// Listen is the proxy's listen address (host:port). Default "127.0.0.1:8080".
	Listen string `yaml:"listen"`
	// Admin configures the admin listener (/metrics, /healthz, /readyz, /admin/status).
	Admin Admin `yaml:"admin"`
	// Shutdown configures graceful shutdown.
	Shutdown Shutdown `yaml:"shutdown"`
	// Tracing overrides the standard OTEL_* environment variables.
	Tracing Tracing `yaml:"tracing"`
	// TLS turns on TLS on the client listener (default off).
	TLS TLS `yaml:"tls"`
	// Server bounds what clients of the proxy listener may cost.
	Server Server `yaml:"server"`
	// Providers are the upstreams Sluice forwards to; at least one.
	Providers []Provider `yaml:"providers"`
	// Cluster, when its redis is set, shares each provider's ceiling with
	// the other replicas of the fleet (cluster.go).
	Cluster Cluster `yaml:"cluster"`
	// Clients are the known clients and their policies (tenant, highest
	// class, rate limits, concurrency cap, providers), matched by the
	// SHA-256 of their key or a trusted hop's header. Without it, every
	// credential is its own tenant and uses at most the default class.
	Clients settings.Clients `yaml:"clients"`
	// Path is the file the config was loaded from: set by [Load] and the
	// [Watcher], "" for configs built by [Parse], [Default] or by hand.
	Path string `yaml:"-"`
	// Warnings are what a load found worth telling but not wrong (keys
	// that no longer do anything), each as FILE:LINE: field.path: message.
	// `sluice validate` and `sluice serve` print them.
	Warnings []string `yaml:"-"`
}

// Admin configures the admin listener.
type Admin struct {
	// Listen is the admin listen address (host:port). Default "127.0.0.1:9090".
	// AdminOff ("off") disables the admin listener. A non-loopback address is
	// allowed; without TokenEnv its endpoints are then readable by anyone
	// who can reach it (Sluice warns at start).
	Listen string `yaml:"listen"`
	// TokenEnv optionally names the environment variable holding the
	// bearer token the admin endpoints require, /healthz and /readyz
	// excepted. The token is read at load time: at least 16 printable
	// ASCII characters, no spaces.
	TokenEnv string `yaml:"token_env"`
	// Token is the token read from TokenEnv ("" when TokenEnv is empty).
	// It prints as "[redacted]".
	Token Secret `yaml:"-"`
}

// MinAdminTokenLen is the shortest admin token accepted.
const MinAdminTokenLen = 16

// AdminOff is the value of Admin.Listen that disables the admin listener.
const AdminOff = "off"

// Shutdown configures graceful shutdown.
type Shutdown struct {
	// Grace is how long in-flight requests may run after a shutdown signal
	// before they are cut. Default 30s, range 0..1h; 0 cuts them at once.
	Grace time.Duration `yaml:"grace"`
}

// Tracing overrides the standard OTEL_* environment variables. The zero
// value of each field (and -1 for SampleRatio) means "use the environment".
type Tracing struct {
	// Exporter is "" (use OTEL_TRACES_EXPORTER), "none", "otlp" or "console".
	Exporter string `yaml:"exporter"`
	// SampleRatio is the fraction of root traces sampled, 0..1, or
	// SampleRatioUnset (-1, the default): use OTEL_TRACES_SAMPLER* or the SDK
	// default (parent-based, always on).
	SampleRatio float64 `yaml:"sample_ratio"`
}

// SampleRatioUnset is the Tracing.SampleRatio value meaning "not configured".
const SampleRatioUnset = -1

// Provider is one upstream LLM API and the limits that protect it.
type Provider struct {
	// Name identifies the provider in metrics, logs and errors, and is the
	// identity kept across reloads. Required, unique, [a-z0-9_-]{1,64}.
	Name string `yaml:"name"`
	// Upstream is the absolute http:// or https:// base URL, with a host and
	// an optional base path, without query, fragment or userinfo. It never
	// ends in "/" ([Parse] removes a trailing slash). Exactly one of
	// Upstream and Upstreams is set.
	Upstream string `yaml:"upstream"`
	// Upstreams are several upstreams serving this provider, instead of
	// Upstream (1 to 64 of them).
	Upstreams []Upstream `yaml:"upstreams"`
	// Match selects the requests that go to this provider.
	Match Match `yaml:"match"`
	// Dialect is the API shape: DialectAuto (default: by request path,
	// /v1/messages is Anthropic), DialectOpenAI or DialectAnthropic.
	Dialect string `yaml:"dialect"`
	// APIKeyEnv optionally names the environment variable holding the API
	// key to inject into upstream requests. When empty, the client's own
	// credentials are forwarded.
	APIKeyEnv string `yaml:"api_key_env"`
	// Auth is how an injected key is sent: AuthBearer ("Authorization:
	// Bearer KEY") or AuthXAPIKey ("x-api-key: KEY"). Default: x-api-key when
	// Dialect is anthropic, else bearer.
	Auth string `yaml:"auth"`
	// Headers are extra headers set on every upstream request. Names are
	// HTTP tokens; hop-by-hop headers, Host and Content-Length are rejected.
	Headers map[string]string `yaml:"headers"`
	// TLS configures the connection to an https upstream.
	TLS UpstreamTLS `yaml:"tls"`
	// Timeouts bound each upstream attempt.
	Timeouts Timeouts `yaml:"timeouts"`
	// Limit configures the adaptive concurrency limit.
	Limit settings.Limit `yaml:"limit"`
	// Queue configures the wait queue in front of the limit.
	Queue settings.Queue `yaml:"queue"`
	// Rate configures rate limits (requests and tokens per minute).
	Rate settings.Rate `yaml:"rate"`
	// Retries configures retries of failed upstream attempts.
	Retries settings.Retries `yaml:"retries"`
	// Breaker configures the circuit breaker of each upstream.
	Breaker settings.Breaker `yaml:"breaker"`
	// APIKey is the key read from APIKeyEnv at load time ("" when APIKeyEnv
	// is empty). It prints as "[redacted]"; use string(p.APIKey) to send it.
	APIKey Secret `yaml:"-"`
}

// Dialects.
const (
	DialectAuto      = "auto"
	DialectOpenAI    = "openai"
	DialectAnthropic = "anthropic"
)

// Ways of sending an injected API key.
const (
	AuthBearer  = "bearer"    // Authorization: Bearer KEY
	AuthXAPIKey = "x-api-key" // x-api-key: KEY
)

// Match selects requests by path prefix, Host, or both. At least one is set.
type Match struct {
	// PathPrefix, e.g. "/openai", is matched on whole path segments and
	// stripped before forwarding. It starts with "/", does not end with "/",
	// has no "." or ".." segments, and is unique across providers.
	PathPrefix string `yaml:"path_prefix"`
	// Host is an exact host name or IP address: lower case, no port, no
	// trailing dot, IPv6 without brackets ([Parse] lower-cases it and removes
	// IPv6 brackets). The proxy ignores the request's port when matching.
	// Providers matched by Host alone must have distinct hosts.
	Host string `yaml:"host"`
}

// Timeouts bound an upstream attempt.
type Timeouts struct {
	// Connect bounds the TCP and TLS handshake. Default 5s, 1ms..5m.
	Connect time.Duration `yaml:"connect"`
	// FirstToken bounds, for a streaming request, the wait for the
	// upstream's response headers and its first output token. Non-streaming
	// requests have Total instead. Default 60s, 1ms..1h.
	FirstToken time.Duration `yaml:"first_token"`
	// Idle is the longest silence allowed between body chunks once the
	// first token has arrived; a silent stream is cut between 1 and 1 1/8
	// of it after its last chunk. Default 30s, 1ms..1h.
	Idle time.Duration `yaml:"idle"`
	// Total bounds the whole response. Default 10m, 1ms..24h, >= FirstToken.
	Total time.Duration `yaml:"total"`
}

// Default values.
const (
	DefaultListen      = "127.0.0.1:8080"
	DefaultAdminListen = "127.0.0.1:9090"
)

// Default returns a Config holding every top-level default and no
// providers (the cluster block is off). It is not valid as is: add at
// least one provider (start from [DefaultProvider]).
func Default() *Config {
	return &Config{
		Listen:   DefaultListen,
		Admin:    Admin{Listen: DefaultAdminListen},
		Shutdown: Shutdown{Grace: 30 * time.Second},
		Tracing:  Tracing{SampleRatio: SampleRatioUnset},
		Server:   DefaultServer(),
		Cluster:  DefaultCluster(),
	}
}

// DefaultProvider returns a Provider with every default filled in. Name,
// Upstream and Match are left empty: a provider needs them to be valid.
// Auth is AuthBearer (the default for dialect auto); set AuthXAPIKey for an
// Anthropic upstream that gets an injected key. Its lists are its own.
func DefaultProvider() Provider {
	return Provider{
		Dialect: DialectAuto,
		Auth:    AuthBearer,
		Timeouts: Timeouts{
			Connect:    5 * time.Second,
			FirstToken: 60 * time.Second,
			Idle:       30 * time.Second,
			Total:      10 * time.Minute,
		},
		Limit:   settings.DefaultLimit(),
		Queue:   settings.DefaultQueue(),
		Rate:    settings.DefaultRate(),
		Retries: settings.DefaultRetries(),
		Breaker: settings.DefaultBreaker(),
	}
}

// DefaultUpstream returns an upstreams: entry with its defaults.
func DefaultUpstream() Upstream { return Upstream{Upstream: settings.DefaultUpstream()} }

// defaultAuth is the Auth used when none is configured.
func defaultAuth(dialect string) string {
	if dialect == DialectAnthropic {
		return AuthXAPIKey
	}
	return AuthBearer
}
