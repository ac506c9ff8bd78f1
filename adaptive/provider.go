package adaptive

import (
	"fmt"
	"sort"

	"github.com/sluicehq/sluice/settings"
)

// ProviderSettings are everything adaptive builds for one provider: its
// limiter (limit and queue blocks), its rate layer (rate:), its retry
// policy (retries:), and its upstreams with their breakers (upstreams: or
// the one upstream:, and breaker:).
type ProviderSettings struct {
	LimiterSettings
	Rate    settings.Rate
	Retry   settings.Retries
	Breaker settings.Breaker
	// Upstreams are the provider's upstreams: 1 to settings.MaxUpstreams, names
	// unique. A provider configured with one upstream: URL has one,
	// named SingleUpstream.
	Upstreams []settings.Upstream
}

// LimiterSettings are everything a provider's Limiter is built from: its
// limit and queue blocks.
type LimiterSettings struct {
	Limit settings.Limit
	Queue settings.Queue
}

// SingleUpstream is the name of the upstream of a provider configured with
// one upstream: URL (the name an unnamed first entry of upstreams: gets
// too, so that moving from one form to the other keeps its state).
const SingleUpstream = "0"

// DefaultProviderSettings returns l with the default rate, retry and
// breaker settings and one default upstream named SingleUpstream.
func DefaultProviderSettings(l LimiterSettings) ProviderSettings {
	u := settings.DefaultUpstream()
	u.Name = SingleUpstream
	return ProviderSettings{
		LimiterSettings: l,
		Rate:            settings.DefaultRate(),
		Retry:           settings.DefaultRetries(),
		Breaker:         settings.DefaultBreaker(),
		Upstreams:       []settings.Upstream{u},
	}
}

// Provider is one provider's admission stack, in the order a request
// meets it: the rate layer (Rates.Reserve), the limiter (a Permit), the
// upstreams (UpstreamSet.Pick, an Attempt), and the retry policy. The
// Registry keeps it across reloads by the provider's name; its parts are
// live and safe for concurrent use.
//
// With one upstream, the limiter's controller is that upstream's own
// (a Permit feeds it; Attempts do not feed it again), so a provider with
// one upstream pays nothing for the set. With several, the limiter's
// controller is the UpstreamSet: the sum of the upstreams' usable limits.
type Provider struct {
	Limiter   *Limiter
	Rates     *Rates
	Upstreams *UpstreamSet
	Retry     *RetryPolicy
}

// problems returns every problem of s for provider name, or nil.
func (s ProviderSettings) problems(name string) *SettingsError {
	e := &SettingsError{Provider: name, Limit: s.Limit.Problems(), Queue: s.Queue.Problems()}
	add := func(prefix string, ps []settings.Problem) {
		for _, p := range ps {
			e.Admission = append(e.Admission, settings.Problem{Key: prefix + p.Key, Msg: p.Msg})
		}
	}
	add("rate.", s.Rate.Problems())
	add("retries.", s.Retry.Problems())
	add("breaker.", s.Breaker.Problems())
	if n := len(s.Upstreams); n < 1 || n > settings.MaxUpstreams {
		add("", []settings.Problem{{Key: "upstreams", Msg: fmt.Sprintf("need 1 to %d, got %d", settings.MaxUpstreams, n)}})
	}
	seen := map[string]bool{}
	for i, u := range s.Upstreams {
		prefix := fmt.Sprintf("upstreams[%d].", i)
		add(prefix, u.Problems())
		if seen[u.Name] {
			add(prefix, []settings.Problem{{Key: "name", Msg: fmt.Sprintf("duplicate name %q", u.Name)}})
		}
		seen[u.Name] = true
	}
	if len(e.Limit) == 0 && len(e.Queue) == 0 && len(e.Admission) == 0 {
		return nil
	}
	return e
}

// ReconcileProviders makes the registry hold exactly the providers of
// want, and returns each one's admission stack. It is all or nothing: when
// any provider's settings are invalid it returns every problem (one
// *SettingsError per provider, joined) and changes nothing.
//
// A provider already present keeps its stack: permits in use and waiters,
// rate buckets with their tokens in use (see Rates.Reconfigure), the retry
// budget, and each upstream still configured under the same name with its
// in-flight attempts, breaker, learned quota and learned limit (see
// UpstreamSet.Reconfigure: when the limit settings changed and the
// algorithm did not, its new controller starts from the limit the old one
// had reached). Providers absent from want are forgotten; requests still
// holding their permits finish normally.
func (r *Registry) ReconcileProviders(want map[string]ProviderSettings) (map[string]*Provider, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		if e := want[name].problems(name); e != nil {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	out := make(map[string]*Provider, len(want))
	next := make(map[string]*entry, len(want))
	for _, name := range names {
		set := want[name]
		follow := set.Rate.ProviderHeaders == settings.HeadersFollow
		var p *Provider
		if old := r.entries[name]; old != nil {
			p = old.prov
			p.Rates.Reconfigure(set.Rate)
			p.Retry.Reconfigure(set.Retry)
			p.Upstreams.reconfigure(set.Limit, set.Breaker, set.Upstreams, follow, true, set.Rate.MaxAccounts)
			p.Limiter.reconfigure(set.LimiterSettings, p.Upstreams.providerController())
		} else {
			ups := &UpstreamSet{clk: r.clk, epoch: r.clk.Now()}
			ups.reconfigure(set.Limit, set.Breaker, set.Upstreams, follow, true, set.Rate.MaxAccounts)
			p = &Provider{
				Rates:     NewRates(set.Rate, r.clk),
				Retry:     NewRetryPolicy(set.Retry, nil),
				Upstreams: ups,
			}
			p.Limiter = newLimiter(set.LimiterSettings, ups.providerController(), r.clk)
		}
		next[name] = &entry{lim: p.Limiter, set: set.LimiterSettings, prov: p}
		out[name] = p
	}
	r.entries = next
	return out, nil
}

// Provider returns the admission stack of the named provider, or nil.
func (r *Registry) Provider(name string) *Provider {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[name]; e != nil {
		return e.prov
	}
	return nil
}
