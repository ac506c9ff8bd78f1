package adaptive

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/settings"
)

// Registry builds, keeps and retires the limiters of a set of named
// providers. It is the one place a limiter's life is decided: what carries
// over a reload (permits in use, waiters, the learned limit) and what
// starts afresh.
type Registry struct {
	clk control.Clock

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	lim  *Limiter
	prov *Provider
	// set is the configured settings (Initial as configured, not the
	// carried-over starting point), to tell a changed config from an
	// unchanged one.
	set LimiterSettings
}

// NewRegistry returns an empty registry whose limiters and controllers
// read clk (nil: SystemClock).
func NewRegistry(clk control.Clock) *Registry {
	if clk == nil {
		clk = SystemClock{}
	}
	return &Registry{clk: clk, entries: make(map[string]*entry)}
}

// SettingsError lists every problem of one provider's settings.
type SettingsError struct {
	Provider string
	// Limit and Queue problems; Param is the YAML key inside the block.
	Limit []settings.Problem
	Queue []settings.Problem
	// Admission problems: the rate, retries, breaker and upstreams
	// settings; Param is the YAML key inside the provider
	// ("rate.per_client.max_keys", "upstreams[1].weight").
	Admission []settings.Problem
}

func (e *SettingsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "provider %s:", e.Provider)
	for _, p := range e.Limit {
		fmt.Fprintf(&b, " limit.%s;", p)
	}
	for _, p := range e.Queue {
		fmt.Fprintf(&b, " queue.%s;", p)
	}
	for _, p := range e.Admission {
		fmt.Fprintf(&b, " %s;", p)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Reconcile makes the registry hold exactly the providers of want, with
// the default rate, retry and breaker settings and one upstream each (see
// ReconcileProviders, which this calls), and returns the limiter of each.
// It is all or nothing: when any provider's settings are invalid it
// returns every problem (one *SettingsError per provider, joined) and
// changes nothing.
//
// For a provider already present, the limiter is kept, so permits in use
// and waiters carry over. Its controller is kept too when the limit
// settings are unchanged; when they changed it is rebuilt, and with the
// same algorithm the new one starts from the limit the old one had
// reached (clamped to the new min and ceiling) instead of the configured
// initial. Queue settings apply to the live queue. Providers absent from
// want are forgotten; requests still holding their permits finish
// normally.
func (r *Registry) Reconcile(want map[string]LimiterSettings) (map[string]*Limiter, error) {
	ps := make(map[string]ProviderSettings, len(want))
	for name, set := range want {
		ps[name] = DefaultProviderSettings(set)
	}
	provs, err := r.ReconcileProviders(ps)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*Limiter, len(provs))
	for name, p := range provs {
		out[name] = p.Limiter
	}
	return out, nil
}

// joinErrors joins errs (errors.Join), so that errors.As finds each.
func joinErrors(errs []error) error { return errors.Join(errs...) }

// Limiter returns the limiter of the named provider, or nil.
func (r *Registry) Limiter(name string) *Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[name]; e != nil {
		return e.lim
	}
	return nil
}
