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
	// Upstream is the configured base URL without userinfo.
	Upstream string
	Limiter  adaptive.Stats
}

// Providers returns the state of every provider of the config in force, in
// config order.
func (s *Server) Providers() []ProviderState {
	snap := s.snap.Load()
	out := make([]ProviderState, 0, len(snap.providers))
	for _, p := range snap.providers {
		out = append(out, ProviderState{
			Name:     p.name,
			Dialect:  p.cfg.Dialect,
			Upstream: redactUpstream(p.cfg.Upstream),
			Limiter:  p.limiter.Stats(),
		})
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
