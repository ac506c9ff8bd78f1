package proxy

import (
	"net/url"

	"github.com/sluicehq/sluice/adaptive"
)

// ProviderState is one configured provider as operators see it: what it is
// and its limiter's state. The admin endpoints and metrics are built from
// it.
type ProviderState struct {
	Name    string
	Dialect string // config dialect: auto, openai or anthropic
	// Upstream is the configured base URL without userinfo (the first
	// upstream's, for a provider with several).
	Upstream string
	Limiter  adaptive.Stats
	// Rates is the rate layer: the provider's own quota (rate:), refusals
	// by scope, tracked client keys.
	Rates adaptive.RateStats
	// Upstreams are the provider's upstreams, in configured order: limit,
	// in flight, breaker, quota (configured or learned from the
	// provider's headers), attempts, failovers; with their base URLs
	// (without userinfo) in URLs.
	Upstreams []adaptive.UpstreamStats
	URLs      []string
	// Retries is the retry policy: decisions by reason, the budget's
	// window.
	Retries adaptive.RetryStats
}

// Providers returns the state of every provider of the config in force, in
// config order.
func (s *Server) Providers() []ProviderState {
	snap := s.snap.Load()
	now := s.now()
	out := make([]ProviderState, 0, len(snap.providers))
	for _, p := range snap.providers {
		ps := ProviderState{
			Name:      p.name,
			Dialect:   p.cfg.Dialect,
			Upstream:  redactUpstream(p.ups[0].url),
			Limiter:   p.limiter.Stats(),
			Rates:     p.adm.Rates.Stats(now),
			Upstreams: p.adm.Upstreams.Stats(now),
			Retries:   p.adm.Retry.Stats(now),
		}
		for _, u := range ps.Upstreams {
			url := ""
			for _, up := range p.ups {
				if up.name == u.Name {
					url = redactUpstream(up.url)
				}
			}
			ps.URLs = append(ps.URLs, url)
		}
		out = append(out, ps)
	}
	return out
}

func redactUpstream(u string) string {
	pu, err := url.Parse(u)
	if err != nil || pu.User == nil {
		return u
	}
	pu.User = nil
	return pu.String()
}
