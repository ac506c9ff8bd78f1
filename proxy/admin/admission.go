package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/proxy"
)

// The rate layer, the upstreams with their breakers, and the retry policy
// of each provider, as /admin/status and /metrics show them (read at
// request or scrape time: the request path pays nothing for them).

// RateView is a provider's rate layer.
type RateView struct {
	// Provider is the provider's own quota (rate:), by dimension
	// (requests, tokens, input_tokens, output_tokens); absent when
	// nothing is configured.
	Provider map[string]QuotaView `json:"provider,omitempty"`
	// Limited counts the requests Sluice answered 429 for a rate limit,
	// by scope (provider, client, upstream); TooLarge those that could
	// never fit (over_quota); Waited those that waited for their rate.
	Limited  map[string]uint64 `json:"limited"`
	TooLarge uint64            `json:"too_large"`
	Waited   uint64            `json:"waited"`
	// ClientKeys is the number of client keys tracked (per-client
	// limits); keys are hashed and never shown.
	ClientKeys int `json:"client_keys"`
}

// QuotaView is one dimension of a quota: its limit per window, what is
// left now (negative: debt) and the window.
type QuotaView struct {
	Limit         int64   `json:"limit"`
	Remaining     int64   `json:"remaining"`
	WindowSeconds float64 `json:"window_seconds"`
}

// UpstreamView is one upstream of a provider.
type UpstreamView struct {
	Name   string `json:"name"`
	URL    string `json:"url"` // without userinfo
	Weight int    `json:"weight"`
	// Limit is the upstream's own adaptive limit (capped by its ceiling);
	// Inflight its attempts in flight.
	Limit    int `json:"limit"`
	Inflight int `json:"inflight"`
	// Breaker is closed, open or half_open; OpenForSeconds how long until
	// an open breaker lets probes through.
	Breaker             string  `json:"breaker"`
	OpenForSeconds      float64 `json:"open_for_seconds,omitempty"`
	ConsecutiveFailures int     `json:"consecutive_failures"`
	Opened              uint64  `json:"breaker_opened"`
	QuotaOpened         uint64  `json:"breaker_opened_quota"`
	// Quota is the upstream's quota by dimension: configured, or learned
	// from the provider's rate-limit headers; one per account and model,
	// of which this is the most spent.
	Quota map[string]QuotaView `json:"quota,omitempty"`
	// Accounts and Quotas count the accounts and (account, model) quotas
	// learned; AccountsOverflow the lookups that found no place.
	Accounts         int    `json:"accounts"`
	Quotas           int    `json:"quotas"`
	AccountsOverflow uint64 `json:"accounts_overflow"`
	// Attempts counts finished attempts, Failures those the breaker
	// counted as failures, Failovers those that came from another
	// upstream.
	Attempts  uint64 `json:"attempts"`
	Failures  uint64 `json:"failures"`
	Failovers uint64 `json:"failovers"`
}

// RetryView is a provider's retry policy.
type RetryView struct {
	// Decisions counts the retry policy's answers for failed attempts by
	// reason: retried, and why not (not_retryable, client_started,
	// max_attempts, no_alternative, retry_after_too_long, deadline,
	// budget).
	Decisions map[string]uint64 `json:"decisions"`
	// WindowRequests and WindowRetries are the budget's counts over its
	// window.
	WindowRequests int64 `json:"window_requests"`
	WindowRetries  int64 `json:"window_retries"`
}

func quotaView(q [adaptive.NumDims]adaptive.QuotaDimStats) map[string]QuotaView {
	var m map[string]QuotaView
	for d := adaptive.Dim(0); d < adaptive.NumDims; d++ {
		if s := q[d]; s.Capacity > 0 {
			if m == nil {
				m = map[string]QuotaView{}
			}
			m[d.String()] = QuotaView{Limit: s.Capacity, Remaining: s.Level, WindowSeconds: s.Window.Seconds()}
		}
	}
	return m
}

func rateView(r adaptive.RateStats) RateView {
	v := RateView{Provider: quotaView(r.Provider), Limited: map[string]uint64{}, TooLarge: r.TooLarge, Waited: r.Waited, ClientKeys: r.ClientKeys}
	for s := adaptive.ScopeProvider; s < adaptive.NumRateScopes; s++ {
		v.Limited[s.String()] = r.Limited[s]
	}
	return v
}

func upstreamViews(p proxy.ProviderState) []UpstreamView {
	out := make([]UpstreamView, len(p.Upstreams))
	for i, u := range p.Upstreams {
		out[i] = UpstreamView{
			Name: u.Name, URL: p.URLs[i], Weight: u.Weight, Limit: u.Limit, Inflight: u.Inflight,
			Breaker: u.Breaker.State.String(), OpenForSeconds: u.Breaker.OpenFor.Seconds(),
			ConsecutiveFailures: u.Breaker.ConsecutiveFailures, Opened: u.Breaker.Opened, QuotaOpened: u.Breaker.QuotaOpened,
			Quota: quotaView(u.Quota), Attempts: u.Attempts, Failures: u.Failures, Failovers: u.Failovers,
			Accounts: u.Accounts.Accounts, Quotas: u.Accounts.Quotas, AccountsOverflow: u.Accounts.Overflow,
		}
	}
	return out
}

func retryView(r adaptive.RetryStats) RetryView {
	v := RetryView{Decisions: map[string]uint64{}, WindowRequests: r.WindowRequests, WindowRetries: r.WindowRetries}
	for k := adaptive.RetryYes; k < adaptive.NumRetryReasons; k++ {
		if k != adaptive.RetryNotFailed {
			v.Decisions[k.String()] = r.Decisions[k]
		}
	}
	return v
}

var (
	descRateLimit = newDesc("sluice_rate_limit",
		"A quota's limit per window, by dimension (requests, tokens, input_tokens, output_tokens): scope provider is rate: (upstream empty); scope upstream is an upstream's quota, configured or learned from the provider's rate-limit headers.",
		"provider", "scope", "upstream", "dimension")
	descRateRemaining = newDesc("sluice_rate_remaining",
		"What is left of a quota now, by dimension (negative: debt, a request used more than it reserved); labels as sluice_rate_limit.",
		"provider", "scope", "upstream", "dimension")
	descRateWindow = newDesc("sluice_rate_window_seconds",
		"The window of a quota's limit (a minute when configured; learned from the provider's reset times); labels as sluice_rate_limit.",
		"provider", "scope", "upstream", "dimension")
	descRateWaited = newDesc("sluice_rate_waited_requests_total",
		"Requests that waited for their rate reservation (within queue.max_wait).", "provider")
	descRatePoolShort = newDesc("sluice_rate_pool_short_total",
		"Reservations this replica's pool of a fleet-wide rate limit could not cover at once (tried again within queue.max_wait; a final refusal is counted as a rate_limit_provider outcome).", "provider")
	descRateClientKeys = newDesc("sluice_rate_client_keys",
		"Client keys tracked by per-client rate limits (hashed; never exported).", "provider")
	descUpAccounts = newDesc("sluice_upstream_quota_accounts",
		"Accounts (kind accounts) and (account, model) quotas (kind quotas) an upstream learns from the provider's rate-limit headers: each client credential is its own account when no key is injected.", "provider", "upstream", "kind")
	descUpAccountsOverflow = newDesc("sluice_upstream_quota_overflow_total",
		"Lookups of an account or model that found no place in the upstream's table (rate.max_accounts, or an account's models): those requests were not limited by a learned quota.", "provider", "upstream")
	descUpLimit = newDesc("sluice_upstream_limit",
		"An upstream's own adaptive concurrency limit, capped by its ceiling; the provider's limit is the sum of its upstreams' usable limits.", "provider", "upstream")
	descUpInflight = newDesc("sluice_upstream_inflight_requests",
		"Attempts in flight to an upstream.", "provider", "upstream")
	descUpBreaker = newDesc("sluice_upstream_breaker_state",
		"1 for an upstream's circuit breaker state now (state: closed, open, half_open), 0 for the others.", "provider", "upstream", "state")
	descUpOpened = newDesc("sluice_upstream_breaker_opened_total",
		"Times an upstream's breaker opened, by cause (failures: consecutive failures or failure ratio; quota: a billing or quota error).", "provider", "upstream", "cause")
	descUpAttempts = newDesc("sluice_upstream_attempts_total",
		"Upstream attempts finished (retries included), by upstream.", "provider", "upstream")
	descUpFailures = newDesc("sluice_upstream_attempt_failures_total",
		"Upstream attempts the breaker counted as failures (5xx, connect errors, resets, first-token timeouts, broken streams; a 503 or 529 only while another upstream could take the traffic).", "provider", "upstream")
	descUpFailovers = newDesc("sluice_upstream_failovers_total",
		"Attempts sent to this upstream instead of the one the request was bound to or whose attempt failed.", "provider", "upstream")
	descRetries = newDesc("sluice_retry_decisions_total",
		"The retry policy's decisions about failed attempts, by decision: retried, or why not (not_retryable, client_started, max_attempts, no_alternative, retry_after_too_long, deadline, budget).", "provider", "decision")
	descRetryWindow = newDesc("sluice_retry_budget_window",
		"The retry budget's counts over its window (kind: requests, retries).", "provider", "kind")

	admissionDescs = []*prometheus.Desc{descRateLimit, descRateRemaining, descRateWindow, descRateWaited, descRatePoolShort, descRateClientKeys,
		descUpAccounts, descUpAccountsOverflow, descUpLimit, descUpInflight, descUpBreaker, descUpOpened, descUpAttempts, descUpFailures, descUpFailovers,
		descRetries, descRetryWindow}
)

var breakerStates = []adaptive.BreakerState{adaptive.BreakerClosed, adaptive.BreakerOpen, adaptive.BreakerHalfOpen}

// collectAdmission exports one provider's rate layer, upstreams and retry
// policy.
func collectAdmission(ch chan<- prometheus.Metric, p proxy.ProviderState) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	n := p.Name
	quota := func(scope, up string, q [adaptive.NumDims]adaptive.QuotaDimStats) {
		for d := adaptive.Dim(0); d < adaptive.NumDims; d++ {
			if s := q[d]; s.Capacity > 0 {
				gauge(descRateLimit, float64(s.Capacity), n, scope, up, d.String())
				gauge(descRateRemaining, float64(s.Level), n, scope, up, d.String())
				gauge(descRateWindow, s.Window.Seconds(), n, scope, up, d.String())
			}
		}
	}
	quota(adaptive.ScopeProvider.String(), "", p.Rates.Provider)
	counter(descRateWaited, float64(p.Rates.Waited), n)
	counter(descRatePoolShort, float64(p.Rates.PoolShort), n)
	gauge(descRateClientKeys, float64(p.Rates.ClientKeys), n)
	for _, u := range p.Upstreams {
		quota(adaptive.ScopeUpstream.String(), u.Name, u.Quota)
		gauge(descUpAccounts, float64(u.Accounts.Accounts), n, u.Name, "accounts")
		gauge(descUpAccounts, float64(u.Accounts.Quotas), n, u.Name, "quotas")
		counter(descUpAccountsOverflow, float64(u.Accounts.Overflow), n, u.Name)
		gauge(descUpLimit, float64(u.Limit), n, u.Name)
		gauge(descUpInflight, float64(u.Inflight), n, u.Name)
		for _, s := range breakerStates {
			v := 0.0
			if s == u.Breaker.State {
				v = 1
			}
			gauge(descUpBreaker, v, n, u.Name, s.String())
		}
		counter(descUpOpened, float64(u.Breaker.Opened-u.Breaker.QuotaOpened), n, u.Name, "failures")
		counter(descUpOpened, float64(u.Breaker.QuotaOpened), n, u.Name, "quota")
		counter(descUpAttempts, float64(u.Attempts), n, u.Name)
		counter(descUpFailures, float64(u.Failures), n, u.Name)
		counter(descUpFailovers, float64(u.Failovers), n, u.Name)
	}
	for k := adaptive.RetryYes; k < adaptive.NumRetryReasons; k++ {
		if k != adaptive.RetryNotFailed {
			counter(descRetries, float64(p.Retries.Decisions[k]), n, k.String())
		}
	}
	gauge(descRetryWindow, float64(p.Retries.WindowRequests), n, "requests")
	gauge(descRetryWindow, float64(p.Retries.WindowRetries), n, "retries")
}
