package adaptive

import (
	"time"

	"github.com/sluicehq/sluice/settings"
)

// ClientQuota is the quota of one client policy (an entry of clients:, or
// the default policy) at one provider: every key the policy matches
// shares it, so a client cannot gain by using more keys. It is Sluice's
// own policy, settled exactly like the provider's rate: quota, and kept
// across reloads while its policy keeps its name.
type ClientQuota struct {
	q Quota
}

// SetClientQuotas gives each policy of limits (by name; "" is the default
// policy) its quota at this provider, requests counted over the rate
// block's request_window, and returns them. A policy that limits nothing
// gets none. A policy that had a quota keeps it, tokens in use and debt
// included, with its new limits; the quotas of policies no longer named
// are dropped (requests in flight settle on the quota they reserved on).
func (r *Rates) SetClientQuotas(limits map[string]settings.PerMinute) map[string]*ClientQuota {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clk.Now()
	window := r.set.Load().RequestWindow
	out := make(map[string]*ClientQuota, len(limits))
	for name, p := range limits {
		if !p.Any() {
			continue
		}
		l := perMinute(p, window)
		cq := r.policies[name]
		if cq == nil {
			cq = &ClientQuota{}
			cq.q.initQuota(now, r.epoch, l, false)
		} else {
			cq.q.configure(now, l)
		}
		out[name] = cq
	}
	r.policies = out
	return out
}

// Level reports the tokens (or requests) left in dimension d of the
// client's quota at now and its capacity; ok is false when d is not
// limited.
func (cq *ClientQuota) Level(now time.Time, d Dim) (level, capacity int64, ok bool) {
	return cq.q.Level(now, d)
}
