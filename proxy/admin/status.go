package admin

import (
	"encoding/json"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive/cluster"
	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/settings"
)

// StatusReport is the /admin/status document.
type StatusReport struct {
	Time         time.Time      `json:"time"`
	LiveRequests int            `json:"live_requests"`
	Providers    []ProviderView `json:"providers"`
	// Cluster is the fleet as this replica sees it (state coordinated,
	// degraded or starting; each provider's share and leases); absent
	// without a cluster block.
	Cluster *cluster.Status `json:"cluster,omitempty"`
}

// ProviderView is one provider as /admin/status and the status page show
// it. Durations are in seconds; absent times are omitted.
type ProviderView struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	Dialect   string `json:"dialect"`
	Upstream  string `json:"upstream"` // without userinfo
	// Limit is the effective limit: permits that may be in use now.
	Limit      int             `json:"limit"`
	Components LimitComponents `json:"components"`
	// Binding names the part that sets Limit: delay, loss, rate, min,
	// ceiling, fixed or fleet (this replica's share of the fleet).
	Binding    string `json:"binding"`
	Inflight   int    `json:"inflight"`
	Queued     int    `json:"queued"`
	MaxWaiting int    `json:"max_waiting"`
	// TTFTMedianSeconds is the median prompt-normalised TTFT of the delay
	// controller's last closed window; TTFTBaselineSeconds its learned
	// no-load TTFT (or the configured target).
	TTFTMedianSeconds   float64 `json:"ttft_median_seconds"`
	TTFTBaselineSeconds float64 `json:"ttft_baseline_seconds"`
	// TokenRate is the last mid-stream output token rate, tokens/s.
	TokenRate float64 `json:"token_rate"`
	// PaceRPS is the dispatch pace in requests per second, learned from
	// refusals that a request rate explains; 0 while dispatches are not
	// paced.
	PaceRPS float64 `json:"pace_rps"`
	// LastDrop is when the provider last signalled congestion, and
	// LastDropReason the kind: rate_limit, overloaded, unavailable,
	// first_token_timeout.
	LastDrop       *time.Time `json:"last_drop,omitempty"`
	LastDropReason string     `json:"last_drop_reason,omitempty"`
	// FrozenUntil is set while an upstream Retry-After freezes limit growth.
	FrozenUntil *time.Time `json:"frozen_until,omitempty"`

	Admitted         uint64  `json:"admitted"`
	RejectedFull     uint64  `json:"rejected_queue_full"`
	RejectedTimeout  uint64  `json:"rejected_queue_timeout"`
	RejectedDeadline uint64  `json:"rejected_queue_deadline"`
	Displaced        uint64  `json:"rejected_displaced"`
	Canceled         uint64  `json:"canceled_while_queued"`
	QueueWaitSeconds float64 `json:"queue_wait_seconds_total"`

	// Saturation (0..1) is how close the provider is to saturation as the
	// class shares see it; Classes are the queue's priority classes in
	// order; Tenants the tenants with the most tokens used (by id, never
	// by key), of TenantsTracked tracked.
	Saturation     float64      `json:"saturation"`
	Classes        []ClassView  `json:"classes"`
	Tenants        []TenantView `json:"top_tenants"`
	TenantsTracked int          `json:"tenants_tracked"`
	// Rate is the rate layer; Upstreams the provider's upstreams (one for
	// a provider configured with upstream:, named "0"); Retries the retry
	// policy.
	Rate      RateView       `json:"rate"`
	Upstreams []UpstreamView `json:"upstreams"`
	Retries   RetryView      `json:"retries"`

	state control.State
	drops [control.NumDropKinds]uint64
}

// LimitComponents are the parts of the limit: effective = clamp(min(delay,
// loss, rate), min, ceiling). Parts the algorithm does not use are absent.
type LimitComponents struct {
	Delay   *float64 `json:"delay,omitempty"`
	Loss    *float64 `json:"loss,omitempty"`
	Rate    *float64 `json:"rate,omitempty"`
	Min     int      `json:"min"`
	Ceiling int      `json:"ceiling"`
}

// viewOf turns one provider's state into its view.
func viewOf(p proxy.ProviderState) ProviderView {
	st := p.Limiter
	cs := st.Controller
	set := st.Settings
	alg := set.Limit.Algorithm
	v := ProviderView{
		Name:                p.Name,
		Algorithm:           alg,
		Dialect:             p.Dialect,
		Upstream:            p.Upstream,
		Limit:               st.Limit,
		Binding:             st.Binding,
		Inflight:            st.Inflight,
		Queued:              st.Waiting,
		MaxWaiting:          set.Queue.MaxWaiting,
		TTFTMedianSeconds:   cs.TTFTMedian.Seconds(),
		TTFTBaselineSeconds: cs.TTFTBaseline.Seconds(),
		TokenRate:           cs.TokenRate,
		PaceRPS:             cs.Pace,
		Admitted:            st.Admitted,
		RejectedFull:        st.RejectedFull,
		RejectedTimeout:     st.RejectedTimeout,
		RejectedDeadline:    st.RejectedDeadline,
		Displaced:           st.Displaced,
		Canceled:            st.Canceled,
		QueueWaitSeconds:    st.WaitedTotal.Seconds(),
		Saturation:          st.Saturation,
		Classes:             classViews(st.Classes),
		Tenants:             tenantViews(st.Tenants),
		TenantsTracked:      st.TenantsTracked,
		state:               cs,
		drops:               st.Drops,
		Rate:                rateView(p.Rates),
		Upstreams:           upstreamViews(p),
		Retries:             retryView(p.Retries),
	}
	v.Components.Min, v.Components.Ceiling = set.Limit.Min, st.Ceiling
	switch alg {
	case settings.AlgorithmGradient2:
		d, l := cs.Delay, cs.Loss
		v.Components.Delay, v.Components.Loss = &d, &l
	case settings.AlgorithmAIMD:
		l := cs.Loss
		v.Components.Loss = &l
	}
	if set.Limit.MinTokenRate > 0 && cs.Rate > 0 {
		r := cs.Rate
		v.Components.Rate = &r
	}
	if !cs.LastDrop.IsZero() {
		t := cs.LastDrop
		v.LastDrop, v.LastDropReason = &t, cs.LastDropKind.String()
	}
	if !cs.FrozenUntil.IsZero() {
		t := cs.FrozenUntil
		v.FrozenUntil = &t
	}
	return v
}

// Report returns the state of every provider of srv's config in force.
func Report(srv *proxy.Server) StatusReport {
	ps := srv.Providers()
	r := StatusReport{Time: time.Now(), LiveRequests: srv.Live(), Providers: make([]ProviderView, 0, len(ps))}
	for _, p := range ps {
		r.Providers = append(r.Providers, viewOf(p))
	}
	return r
}

func serveStatusJSON(ctx *fasthttp.RequestCtx, srv *proxy.Server, fleet func() cluster.Status) {
	r := Report(srv)
	if fleet != nil {
		st := fleet()
		r.Cluster = &st
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		ctx.Error(err.Error(), fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(append(b, '\n'))
}
