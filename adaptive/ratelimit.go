package adaptive

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/adaptive/internal/bucket"
	"github.com/sluicehq/sluice/settings"
)

// Rates is a provider's rate layer: its own quota (rate: rpm, tpm,
// input_tpm, output_tpm) and, when per-client limits are on, one quota per
// client key. The upstreams' mirrors of the provider's quota live in the
// UpstreamSet; Reserve claims on all of them at once.
type Rates struct {
	clk   control.Clock
	epoch time.Time
	set   atomic.Pointer[settings.Rate]
	prov  Quota
	own   atomic.Bool // own or per-client limits are configured

	mu       sync.Mutex // Reconfigure, SetClientQuotas
	clients  atomic.Pointer[clientTable]
	policies map[string]*ClientQuota // by policy name, under mu (client_quota.go)

	limited  [NumRateScopes]atomic.Uint64 // refused (429), by the scope that refused
	tooLarge atomic.Uint64
	waited   atomic.Uint64 // reservations that had to wait
	// poolShort: refusals by this replica's pool of a fleet-wide quota
	// (RateDecision.Retry), not counted in limited.
	poolShort atomic.Uint64
}

// RateScope names which quota refused a request or made it wait.
type RateScope uint8

const (
	ScopeNone     RateScope = iota
	ScopeProvider           // the provider's own rate: limits
	ScopeClient             // the client's limits: its key's (rate.per_client) or its policy's (clients:)
	ScopeUpstream           // the upstream's quota (configured or learned from the provider)
	// NumRateScopes bounds RateScope values.
	NumRateScopes
)

// String returns the metric label value of s.
func (s RateScope) String() string {
	return [...]string{"", "provider", "client", "upstream", "unknown"}[min(s, NumRateScopes)]
}

// NewRates builds a provider's rate layer with settings s (valid: see
// settings.Rate.Problems). clk nil: SystemClock.
func NewRates(s settings.Rate, clk control.Clock) *Rates {
	if clk == nil {
		clk = SystemClock{}
	}
	now := clk.Now()
	r := &Rates{clk: clk, epoch: now}
	r.prov.initQuota(now, now, OwnLimits(s), false)
	r.Reconfigure(s)
	return r
}

// Reconfigure applies new settings, keeping every bucket's tokens in use.
// Per-client quotas are kept too, unless max_keys changed or per-client
// limits were turned on or off: then the table starts empty (requests in
// flight settle into the table they reserved on).
func (r *Rates) Reconfigure(s settings.Rate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.clk.Now()
	r.prov.configure(now, OwnLimits(s))
	old := r.set.Load()
	tab := r.clients.Load()
	switch {
	case !s.PerClient.Any():
		tab = nil
	case tab == nil || old == nil || old.PerClient.MaxKeys != s.PerClient.MaxKeys:
		tab = newClientTable(now, r.epoch, clientLimits(s), s.PerClient.MaxKeys)
	default:
		tab.reconfigure(now, clientLimits(s))
	}
	r.clients.Store(tab)
	r.set.Store(&s)
	r.own.Store(s.PerMinute.Any() || tab != nil)
}

// Needed reports whether a request of this provider must go through
// Reserve: the provider's own or per-client limits are configured, or a
// quota of ups limits something (configured for an upstream, or learned
// from the provider's rate-limit headers; ups may be nil). When it is not,
// nothing could limit the request: the proxy skips the rate layer (no
// reservation, nothing to settle), so a provider without rate limits pays
// a few atomic loads for it. A provider whose headers are followed turns
// its upstream's quota on with the first response that reports one.
func (r *Rates) Needed(ups *UpstreamSet) bool {
	return r.own.Load() || (ups != nil && ups.quotasOn())
}

// Settings returns the settings in force.
func (r *Rates) Settings() settings.Rate { return *r.set.Load() }

// Demand is the demand of a request with the estimated prompt size and
// the max output tokens it names (0: none named, the configured default
// is used).
func (r *Rates) Demand(promptTokens, maxOutputTokens int) Demand {
	if maxOutputTokens <= 0 {
		maxOutputTokens = r.set.Load().DefaultMaxOutputTokens
	}
	return Demand{InputTokens: promptTokens, OutputTokens: maxOutputTokens}
}

// Quota returns the provider's own quota.
func (r *Rates) Quota() *Quota { return &r.prov }

// PacesRequests reports whether the provider's own quota limits requests
// (rate.rpm is configured): Sluice then sends requests at a rate it was
// told, and a provider's rate-limit refusal is the rate layer's concern,
// not a congestion signal for the concurrency limit.
func (r *Rates) PacesRequests() bool { return r.prov.b[DimRequests].On() }

// RateDecision is Reserve's answer.
type RateDecision struct {
	// Wait, when the request was admitted, is how long it must wait
	// before it goes on (0: at once): its tokens are reserved from then.
	Wait time.Duration
	// Limited: nothing was reserved; answer 429 with RetryAfter.
	Limited bool
	// TooLarge: nothing was reserved; the request needs more than a
	// quota's whole capacity and can never fit (answer 429 without
	// Retry-After, as providers do for a request larger than the limit).
	TooLarge bool
	// RetryAfter (Limited) is how long until the request would fit in
	// every quota, computed from the buckets: an honest Retry-After.
	RetryAfter time.Duration
	// Scope is the quota that refused the request, or made it wait longest.
	Scope RateScope
	// Retry (Limited) says the refusal came from this replica's pool of a
	// fleet-wide quota (rate_fleet.go): the pool is being refilled, and a
	// caller that can wait may try again after RetryAfter, without
	// counting on a reservation.
	Retry bool
}

// Reservation is one request's claims on its provider's quotas: the
// provider's own, its client key's, and the mirror quota of the upstream
// it is bound to until Pick moves that claim into the first Attempt. It
// lives in the request's state (no allocation) and ends with one Settle,
// called from the request's one exit (it is not safe for concurrent
// Settle calls).
type Reservation struct {
	rates    *Rates
	prov     claim
	client   claim
	centry   *clientEntry
	ctab     *clientTable
	key      QuotaKey
	pol      claim
	cq       *ClientQuota
	up       claim
	upq      *modelQuota // held while up is: the quota of key at bound
	bound    *Upstream
	cost     costs
	attempts int
}

// Reserve claims d at now on the provider's quota, the quota of the client
// whose key hashes to clientKey (when per-client limits are on), and the
// quota of one upstream of ups (nil: none), all or nothing. The upstream
// is the usable one (breaker not open) where d fits soonest, the best
// scored among equals; the reservation is bound to it, and Pick sends the
// first attempt there when it can.
//
// When d fits everywhere within maxWait, it is reserved and Wait says how
// long to wait before going on (the proxy sleeps, and leaves with Settle
// if the client goes away). When it does not, nothing is reserved:
// Limited, with RetryAfter the time until it would fit (the longest over
// the quotas), or TooLarge. res must not hold a reservation (Settle it
// first). Reserve does not allocate.
func (r *Rates) Reserve(now time.Time, clientKey uint64, d Demand, ups *UpstreamSet, maxWait time.Duration, res *Reservation) RateDecision {
	return r.ReserveFor(now, clientKey, nil, d, ups, maxWait, res)
}

// ReserveFor is Reserve for a request of a client whose policy has the
// quota cq at this provider (nil: none), claimed with the others, all or
// nothing; a refusal by it is ScopeClient.
func (r *Rates) ReserveFor(now time.Time, clientKey uint64, cq *ClientQuota, d Demand, ups *UpstreamSet, maxWait time.Duration, res *Reservation) RateDecision {
	*res = Reservation{rates: r, cost: d.costs(), key: d.Key}
	var dec RateDecision
	note := func(w time.Duration, scope RateScope) {
		if w > dec.Wait {
			dec.Wait, dec.Scope = w, scope
		}
	}
	w, ok, tl := r.prov.reserve(now, &res.prov, res.cost, maxWait)
	if !ok {
		return r.refuse(now, res, ScopeProvider, tl, clientKey, ups)
	}
	note(w, ScopeProvider)
	if tab := r.clients.Load(); tab != nil {
		e := tab.acquire(now, clientKey)
		res.centry, res.ctab = e, tab
		if w, ok, tl = e.q.reserve(now, &res.client, res.cost, maxWait); !ok {
			return r.refuse(now, res, ScopeClient, tl, clientKey, ups)
		}
		note(w, ScopeClient)
	}
	if cq != nil {
		res.cq = cq
		if w, ok, tl = cq.q.reserve(now, &res.pol, res.cost, maxWait); !ok {
			return r.refuse(now, res, ScopeClient, tl, clientKey, ups)
		}
		note(w, ScopeClient)
	}
	if ups != nil {
		if w, ok, tl = ups.bindRate(now, res.cost, maxWait, res); !ok {
			return r.refuse(now, res, ScopeUpstream, tl, clientKey, ups)
		}
		note(w, ScopeUpstream)
	}
	if dec.Wait > 0 {
		r.waited.Add(1)
	}
	return dec
}

// refuse undoes what res holds and answers why, with an honest
// Retry-After: the longest wait over every quota the request needs.
func (r *Rates) refuse(now time.Time, res *Reservation, scope RateScope, tooLarge bool, clientKey uint64, ups *UpstreamSet) RateDecision {
	cq := res.cq
	res.Settle(now, Usage{})
	if tooLarge {
		r.tooLarge.Add(1)
		return RateDecision{TooLarge: true, Scope: scope}
	}
	_, leased := r.InFleet()
	retry := leased && scope == ScopeProvider
	if retry {
		r.poolShort.Add(1)
	} else {
		r.limited[scope].Add(1)
	}
	nt := r.prov.clk.Ticks(now)
	wait := max(r.prov.waitFor(nt, res.cost), 0)
	if tab := r.clients.Load(); tab != nil {
		e := tab.acquire(now, clientKey)
		wait = max(wait, e.q.waitFor(e.q.clk.Ticks(now), res.cost))
		tab.release(e)
	}
	if cq != nil {
		wait = max(wait, cq.q.waitFor(cq.q.clk.Ticks(now), res.cost))
	}
	if ups != nil {
		if w, ok := ups.soonest(now, res.key, res.cost); ok {
			wait = max(wait, bucket.TicksOf(w))
		}
	}
	return RateDecision{Limited: true, RetryAfter: bucket.DurationOf(wait), Scope: scope, Retry: retry}
}

// settleUp gives back the claim on the bound upstream's quota that no
// attempt took, and the hold on that quota.
func (res *Reservation) settleUp(now time.Time) {
	if mq := res.upq; mq != nil {
		mq.q.settle(now, &res.up, Usage{})
		mq.release()
		res.upq = nil
	}
}

// Bound returns the upstream the reservation is bound to (nil: none).
func (res *Reservation) Bound() *Upstream { return res.bound }

// Attempts returns how many attempts Pick has started for the request.
func (res *Reservation) Attempts() int { return res.attempts }

// Settle ends the reservation at now with what the request used: the
// provider's and the client's quotas get back what it reserved and did
// not use, or are charged what it used beyond (u.Sent false: it used
// nothing and everything goes back), and a claim on an upstream that no
// attempt took is given back. The attempts' own claims are settled by
// Attempt.Finish. A second Settle does nothing.
func (res *Reservation) Settle(now time.Time, u Usage) {
	if res.rates == nil {
		return
	}
	res.rates.prov.settle(now, &res.prov, u)
	if res.centry != nil {
		res.centry.q.settle(now, &res.client, u)
		res.ctab.release(res.centry)
		res.centry, res.ctab = nil, nil
	}
	if res.cq != nil {
		res.cq.q.settle(now, &res.pol, u)
		res.cq = nil
	}
	res.settleUp(now)
	res.rates = nil
}

// RateStats are a rate layer's counters and its own quota's levels.
type RateStats struct {
	// Provider is the provider's own quota, by dimension.
	Provider [NumDims]QuotaDimStats
	// Limited counts 429s by the scope that refused; TooLarge the requests
	// no quota could ever fit; Waited the requests that had to wait.
	Limited  [NumRateScopes]uint64
	TooLarge uint64
	Waited   uint64
	// ClientKeys is the number of client keys tracked.
	ClientKeys int
	// Fleet: the provider's own quota is fleet-wide (a cluster block);
	// Leased: its tokens are leased from the fleet's bucket now (false
	// while degraded: local at limit / replicas). PoolShort counts
	// reservations this replica's pool could not cover (RateDecision.Retry;
	// not in Limited). Pools are the pools by dimension.
	Fleet, Leased bool
	PoolShort     uint64
	Pools         [NumDims]FleetPoolStats
}

// Stats returns the rate layer's state at now.
func (r *Rates) Stats(now time.Time) RateStats {
	var s RateStats
	for d := range NumDims {
		if lv, c, ok := r.prov.Level(now, d); ok {
			s.Provider[d] = QuotaDimStats{Level: lv, Capacity: c, Window: r.prov.Window(d)}
		}
	}
	for i := range s.Limited {
		s.Limited[i] = r.limited[i].Load()
	}
	s.TooLarge, s.Waited = r.tooLarge.Load(), r.waited.Load()
	s.Fleet, s.Leased = r.InFleet()
	s.PoolShort, s.Pools = r.poolShort.Load(), r.FleetStats()
	if tab := r.clients.Load(); tab != nil {
		s.ClientKeys = tab.tracked()
	}
	return s
}
