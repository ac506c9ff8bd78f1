package proxy

import (
	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
)

// admissionRules adds to r the rules of the rate, retries and breaker
// blocks and of upstreams: entries, translated from adaptive's settings.
func admissionRules(r *config.Rules) {
	r.Rate = config.BlockRules[config.Rate]{
		Default: rateConfig(adaptive.DefaultRateSettings()),
		Check:   func(c config.Rate) []config.Issue { return issues(rateSettings(c).Problems()) },
	}
	r.Retries = config.BlockRules[config.Retries]{
		Default: retriesConfig(adaptive.DefaultRetrySettings()),
		Check:   func(c config.Retries) []config.Issue { return issues(retrySettings(c).Problems()) },
	}
	r.Breaker = config.BlockRules[config.Breaker]{
		Default: breakerConfig(adaptive.DefaultBreakerSettings()),
		Check:   func(c config.Breaker) []config.Issue { return issues(breakerSettings(c).Problems()) },
	}
	r.Upstream = config.BlockRules[config.Upstream]{
		Default: upstreamConfig(adaptive.DefaultUpstreamSettings()),
		Check:   func(c config.Upstream) []config.Issue { return issues(upstreamSettings(c).Problems()) },
	}
	r.SeveralUpstreams = true
}

// providerSettings translates everything adaptive builds for a provider:
// its limit and queue blocks, its rate, retries and breaker blocks, and
// its upstreams (the one upstream: as adaptive.SingleUpstream).
func providerSettings(pc *config.Provider) adaptive.ProviderSettings {
	s := adaptive.ProviderSettings{
		LimiterSettings: limiterSettings(pc),
		Rate:            rateSettings(pc.Rate),
		Retry:           retrySettings(pc.Retries),
		Breaker:         breakerSettings(pc.Breaker),
	}
	for _, uc := range upstreamConfigs(pc) {
		us := upstreamSettings(uc)
		if len(pc.Upstreams) == 0 {
			us = adaptive.DefaultUpstreamSettings()
			us.Name = adaptive.SingleUpstream
		}
		s.Upstreams = append(s.Upstreams, us)
	}
	return s
}

func rateLimits(rpm, tpm, in, out int) adaptive.Limits {
	return adaptive.Limits{Requests: int64(rpm), Tokens: int64(tpm), InputTokens: int64(in), OutputTokens: int64(out)}
}

// rateSettings translates a provider's rate: block. request_window
// applies to the provider's rpm and each client's.
func rateSettings(c config.Rate) adaptive.RateSettings {
	s := adaptive.RateSettings{
		Limits:                 rateLimits(c.RPM, c.TPM, c.InputTPM, c.OutputTPM),
		DefaultMaxOutputTokens: c.DefaultMaxOutputTokens,
		ProviderHeaders:        c.ProviderHeaders,
		PerClient: adaptive.ClientRateSettings{
			Key:     c.PerClient.Key,
			Header:  c.PerClient.Header,
			Limits:  rateLimits(c.PerClient.RPM, c.PerClient.TPM, c.PerClient.InputTPM, c.PerClient.OutputTPM),
			MaxKeys: c.PerClient.MaxKeys,
		},
	}
	s.Limits.RequestWindow, s.PerClient.Limits.RequestWindow = c.RequestWindow, c.RequestWindow
	return s
}

func rateConfig(s adaptive.RateSettings) config.Rate {
	l, pl := s.Limits, s.PerClient.Limits
	return config.Rate{
		RPM: int(l.Requests), TPM: int(l.Tokens), InputTPM: int(l.InputTokens), OutputTPM: int(l.OutputTokens),
		RequestWindow:          l.RequestWindow,
		DefaultMaxOutputTokens: s.DefaultMaxOutputTokens,
		ProviderHeaders:        s.ProviderHeaders,
		PerClient: config.PerClient{
			Key: s.PerClient.Key, Header: s.PerClient.Header,
			RPM: int(pl.Requests), TPM: int(pl.Tokens), InputTPM: int(pl.InputTokens), OutputTPM: int(pl.OutputTokens),
			MaxKeys: s.PerClient.MaxKeys,
		},
	}
}

// retrySettings translates a provider's retries: block.
func retrySettings(c config.Retries) adaptive.RetrySettings {
	return adaptive.RetrySettings(c)
}

func retriesConfig(s adaptive.RetrySettings) config.Retries { return config.Retries(s) }

// breakerSettings translates a provider's breaker: block.
func breakerSettings(c config.Breaker) adaptive.BreakerSettings {
	return adaptive.BreakerSettings(c)
}

func breakerConfig(s adaptive.BreakerSettings) config.Breaker { return config.Breaker(s) }

// upstreamSettings translates the adaptive part of an upstreams: entry.
func upstreamSettings(c config.Upstream) adaptive.UpstreamSettings {
	return adaptive.UpstreamSettings{
		Name:    c.Name,
		Weight:  c.Weight,
		Ceiling: c.Ceiling,
		Limits:  rateLimits(c.Rate.RPM, c.Rate.TPM, c.Rate.InputTPM, c.Rate.OutputTPM),
	}
}

func upstreamConfig(s adaptive.UpstreamSettings) config.Upstream {
	l := s.Limits
	return config.Upstream{
		Name: s.Name, Weight: s.Weight, Ceiling: s.Ceiling,
		Rate: config.UpstreamRate{RPM: int(l.Requests), TPM: int(l.Tokens), InputTPM: int(l.InputTokens), OutputTPM: int(l.OutputTokens)},
	}
}
