package adaptive

import (
	"fmt"
	"strings"
	"time"
)

// RateSettings are a provider's rate limits (the rate: block). Like
// Settings, this is the one place their defaults and ranges are decided;
// Problems names each invalid value by its key inside the block.
type RateSettings struct {
	// Limits are the provider's own per-minute limits: requests (rpm),
	// tokens in and out together (tpm), input tokens (input_tpm), output
	// tokens (output_tpm). 0 (the default) leaves a dimension unlimited.
	// They are Sluice's policy for everything sent to the provider,
	// settled exactly from metered usage. Limits.RequestWindow
	// (request_window, default 1m, 100ms..1m) is the window requests are
	// counted over, for the provider's and each client's rpm.
	Limits Limits
	// DefaultMaxOutputTokens is the output a request that names no
	// max_tokens (or max_completion_tokens / max_output_tokens) reserves.
	// Default 1024, 1..10000000.
	DefaultMaxOutputTokens int
	// ProviderHeaders is HeadersFollow (default): each upstream's quota
	// is learned from the provider's x-ratelimit-* /
	// anthropic-ratelimit-* headers; or HeadersIgnore.
	ProviderHeaders string
	// PerClient limits each client key on its own.
	PerClient ClientRateSettings
}

// Values of RateSettings.ProviderHeaders.
const (
	HeadersFollow = "follow"
	HeadersIgnore = "ignore"
)

// ClientRateSettings limit each client key (the per_client: block).
type ClientRateSettings struct {
	// Key is where a client's key comes from: ClientKeyAPIKey (default,
	// the credential the client sends: Authorization or x-api-key) or
	// ClientKeyHeader (the header named by Header).
	Key string
	// Header names the header that identifies a client when Key is
	// ClientKeyHeader; empty otherwise.
	Header string
	// Limits are each client's per-minute limits; all 0 (the default)
	// turns per-client limits off.
	Limits Limits
	// MaxKeys bounds how many client keys are tracked at once. Default
	// 10000, 1..1000000 (about 400 bytes each). When every tracked key is
	// busy, a new key shares one overflow quota of the same limits.
	MaxKeys int
}

// Values of ClientRateSettings.Key.
const (
	ClientKeyAPIKey = "api_key"
	ClientKeyHeader = "header"
)

// Bounds of the rate settings.
const (
	MaxRPM          = 100_000_000
	MaxTPM          = 10_000_000_000
	maxClientKeys   = 1_000_000
	maxDefaultMaxOT = 10_000_000
)

// DefaultRateSettings returns no limits of Sluice's own, provider headers
// followed, 1024 output tokens reserved for a request that names no
// maximum, and per-client limits off (keyed by API key, 10000 keys).
func DefaultRateSettings() RateSettings {
	return RateSettings{
		Limits:                 Limits{RequestWindow: rateWindow},
		DefaultMaxOutputTokens: 1024,
		ProviderHeaders:        HeadersFollow,
		PerClient:              ClientRateSettings{Key: ClientKeyAPIKey, MaxKeys: 10000, Limits: Limits{RequestWindow: rateWindow}},
	}
}

// Problems lists every invalid rate setting; Param is the key inside the
// rate: block ("per_client.max_keys").
func (s RateSettings) Problems() []Problem {
	var ps []Problem
	ps = limitsProblems(ps, "", s.Limits)
	if w := s.Limits.RequestWindow; w != 0 && (w < 100*time.Millisecond || w > rateWindow) {
		ps = append(ps, Problem{Param: "request_window", Msg: fmt.Sprintf("must be between 100ms and 1m, got %s", fmtDur(w))})
	}
	if n := s.DefaultMaxOutputTokens; n < 1 || n > maxDefaultMaxOT {
		ps = append(ps, Problem{Param: "default_max_output_tokens", Msg: fmt.Sprintf("must be between 1 and %d, got %d", maxDefaultMaxOT, n)})
	}
	switch s.ProviderHeaders {
	case HeadersFollow, HeadersIgnore:
	default:
		ps = append(ps, Problem{Param: "provider_headers", Msg: fmt.Sprintf("must be %q or %q, got %q", HeadersFollow, HeadersIgnore, s.ProviderHeaders)})
	}
	c := s.PerClient
	switch c.Key {
	case ClientKeyAPIKey:
		if c.Header != "" {
			ps = append(ps, Problem{Param: "per_client.header", Msg: fmt.Sprintf("is only used with key: %s", ClientKeyHeader)})
		}
	case ClientKeyHeader:
		if !isHeaderName(c.Header) {
			ps = append(ps, Problem{Param: "per_client.header", Msg: fmt.Sprintf("must name the header that identifies a client (an HTTP token), got %q", c.Header)})
		}
	default:
		ps = append(ps, Problem{Param: "per_client.key", Msg: fmt.Sprintf("must be %q or %q, got %q", ClientKeyAPIKey, ClientKeyHeader, c.Key)})
	}
	ps = limitsProblems(ps, "per_client.", c.Limits)
	if c.MaxKeys < 1 || c.MaxKeys > maxClientKeys {
		ps = append(ps, Problem{Param: "per_client.max_keys", Msg: fmt.Sprintf("must be between 1 and %d, got %d", maxClientKeys, c.MaxKeys)})
	}
	return ps
}

// limitsProblems checks rpm, tpm, input_tpm and output_tpm under prefix.
func limitsProblems(ps []Problem, prefix string, l Limits) []Problem {
	check := func(key string, n, hi int64) {
		if n < 0 || n > hi {
			ps = append(ps, Problem{Param: prefix + key, Msg: fmt.Sprintf("must be between 0 (no limit) and %d, got %d", hi, n)})
		}
	}
	check("rpm", l.Requests, MaxRPM)
	check("tpm", l.Tokens, MaxTPM)
	check("input_tpm", l.InputTokens, MaxTPM)
	check("output_tpm", l.OutputTokens, MaxTPM)
	return ps
}

// isHeaderName reports whether s is an RFC 9110 token.
func isHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// UpstreamSettings are one upstream of a provider as the upstream choice
// sees it (the adaptive part of an upstreams: entry).
type UpstreamSettings struct {
	// Name identifies the upstream in metrics, the status page and the
	// response header naming who served a request; it is also the identity
	// its learned state (limit, quota, breaker) keeps across reloads.
	Name string
	// Weight scales the upstream's share: upstreams are ranked by load
	// relative to their limits divided by weight, so with equal limits,
	// weights 3 and 1 split traffic 3:1. Default 1, 1..1000.
	Weight int
	// Ceiling caps the requests in flight to this upstream (a contractual
	// concurrency, a small replica). 0 (default): only its adaptive limit
	// and the provider's ceiling apply; else 1..MaxCeiling.
	Ceiling int
	// Limits are this upstream's known quota per minute (its key's tier
	// limits), counted the way providers count. 0 leaves a dimension to be
	// learned from the provider's headers (or unlimited if it reports
	// none).
	Limits Limits
}

// Bounds of the upstream settings.
const (
	MaxUpstreams = 64
	maxWeight    = 1000
)

// DefaultUpstreamSettings returns weight 1, no cap of its own, no known
// quota.
func DefaultUpstreamSettings() UpstreamSettings { return UpstreamSettings{Weight: 1} }

// Problems lists every invalid setting of an upstream; Param is the key
// inside its upstreams: entry ("weight", "rate.tpm").
func (u UpstreamSettings) Problems() []Problem {
	var ps []Problem
	if u.Weight < 1 || u.Weight > maxWeight {
		ps = append(ps, Problem{Param: "weight", Msg: fmt.Sprintf("must be between 1 and %d, got %d", maxWeight, u.Weight)})
	}
	if u.Ceiling < 0 || u.Ceiling > MaxCeiling {
		ps = append(ps, Problem{Param: "ceiling", Msg: fmt.Sprintf("must be 0 (the provider's) or between 1 and %d, got %d", MaxCeiling, u.Ceiling)})
	}
	return limitsProblems(ps, "rate.", u.Limits)
}
