package adaptive

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Registry builds, keeps and retires the limiters of a set of named
// providers. It is the one place a limiter's life is decided: what carries
// over a reload (permits in use, waiters, the learned limit) and what
// starts afresh.
type Registry struct {
	clk Clock

	mu      sync.Mutex
	entries map[string]*entry
}

type entry struct {
	lim *Limiter
	// set is the configured settings (Initial as configured, not the
	// carried-over starting point), to tell a changed config from an
	// unchanged one.
	set LimiterSettings
}

// NewRegistry returns an empty registry whose limiters and controllers
// read clk (nil: SystemClock).
func NewRegistry(clk Clock) *Registry {
	if clk == nil {
		clk = SystemClock{}
	}
	return &Registry{clk: clk, entries: make(map[string]*entry)}
}

// SettingsError lists every problem of one provider's settings.
type SettingsError struct {
	Provider string
	// Limit and Queue problems; Param is the YAML key inside the block.
	Limit []Problem
	Queue []Problem
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
	return strings.TrimSuffix(b.String(), ";")
}

// Reconcile makes the registry hold exactly the providers of want, and
// returns the limiter of each. It is all or nothing: when any provider's
// settings are invalid it returns every problem (one *SettingsError per
// provider, joined) and changes nothing.
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
	r.mu.Lock()
	defer r.mu.Unlock()

	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)

	type plan struct {
		old  *entry
		ctrl Controller // nil: keep the current controller
	}
	plans := make(map[string]plan, len(want))
	var errs []error
	for _, name := range names {
		set := want[name]
		lp, qp := set.Limit.Problems(), set.Queue.Problems()
		if len(lp) > 0 || len(qp) > 0 {
			errs = append(errs, &SettingsError{Provider: name, Limit: lp, Queue: qp})
			continue
		}
		old := r.entries[name]
		pl := plan{old: old}
		if old == nil || old.set.Limit != set.Limit {
			start := set.Limit
			if old != nil && old.set.Limit.Algorithm == start.Algorithm {
				cur := old.lim.Limit()
				start.Initial = min(max(cur, start.Min), start.Ceiling)
			}
			ctrl, err := NewController(start, r.clk)
			if err != nil { // unreachable: Problems was empty
				errs = append(errs, fmt.Errorf("provider %s: %w", name, err))
				continue
			}
			pl.ctrl = ctrl
		}
		plans[name] = pl
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	out := make(map[string]*Limiter, len(want))
	next := make(map[string]*entry, len(want))
	for _, name := range names {
		set, pl := want[name], plans[name]
		var lim *Limiter
		if pl.old == nil {
			lim = newLimiter(set, pl.ctrl, r.clk)
		} else {
			lim = pl.old.lim
			lim.reconfigure(set, pl.ctrl)
		}
		next[name] = &entry{lim: lim, set: set}
		out[name] = lim
	}
	r.entries = next
	return out, nil
}

// Limiter returns the limiter of the named provider, or nil.
func (r *Registry) Limiter(name string) *Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entries[name]; e != nil {
		return e.lim
	}
	return nil
}
