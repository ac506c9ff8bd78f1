package proxy

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/url"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
)

// StatusReport is the /admin/status document.
type StatusReport struct {
	Time         time.Time      `json:"time"`
	LiveRequests int            `json:"live_requests"`
	Providers    []ProviderView `json:"providers"`
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
	// ceiling or fixed.
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
	Canceled         uint64  `json:"canceled_while_queued"`
	QueueWaitSeconds float64 `json:"queue_wait_seconds_total"`

	state adaptive.ControllerState
	drops [adaptive.NumDropKinds]uint64
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

// viewOf reads one provider's limiter and controller.
func viewOf(p *provider) ProviderView {
	st := p.limiter.Stats()
	cs := st.Controller
	alg := p.cfg.Limit.Algorithm
	v := ProviderView{
		Name:                p.name,
		Algorithm:           alg,
		Dialect:             p.cfg.Dialect,
		Upstream:            redactUpstream(p.cfg.Upstream),
		Limit:               st.Limit,
		Binding:             st.Binding,
		Inflight:            st.Inflight,
		Queued:              st.Waiting,
		MaxWaiting:          p.cfg.Queue.MaxWaiting,
		TTFTMedianSeconds:   cs.TTFTMedian.Seconds(),
		TTFTBaselineSeconds: cs.TTFTBaseline.Seconds(),
		TokenRate:           cs.TokenRate,
		Admitted:            st.Admitted,
		RejectedFull:        st.RejectedFull,
		RejectedTimeout:     st.RejectedTimeout,
		Canceled:            st.Canceled,
		QueueWaitSeconds:    st.WaitedTotal.Seconds(),
		state:               cs,
		drops:               st.Drops,
	}
	v.Components.Min, v.Components.Ceiling = p.cfg.Limit.Min, st.Ceiling
	switch alg {
	case config.AlgorithmGradient2:
		d, l := cs.Delay, cs.Loss
		v.Components.Delay, v.Components.Loss = &d, &l
	case config.AlgorithmAIMD:
		l := cs.Loss
		v.Components.Loss = &l
	}
	if p.cfg.Limit.MinTokenRate > 0 && cs.Rate > 0 {
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

func redactUpstream(u string) string {
	pu, err := url.Parse(u)
	if err != nil || pu.User == nil {
		return u
	}
	pu.User = nil
	return pu.String()
}

// StatusReport returns the state of every provider of the config in force.
func (s *Server) StatusReport() StatusReport {
	snap := s.snap.Load()
	r := StatusReport{Time: s.now(), LiveRequests: s.Live(), Providers: make([]ProviderView, 0, len(snap.providers))}
	for _, p := range snap.providers {
		r.Providers = append(r.Providers, viewOf(p))
	}
	return r
}

func (s *Server) serveStatusJSON(ctx *fasthttp.RequestCtx) {
	b, err := json.MarshalIndent(s.StatusReport(), "", "  ")
	if err != nil {
		ctx.Error(err.Error(), fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(append(b, '\n'))
}

//go:embed ui/index.html
var statusPageHTML []byte

// StatusPage serves the human status page (/admin/) and keeps a short
// history of each provider's limit, in-flight and queue depth for its chart
// (/admin/history). The page works without the history (it then charts
// from the moment it was opened); Run records it.
type StatusPage struct {
	srv    *Server
	window int // samples kept per provider

	mu   sync.Mutex
	hist map[string]*series
}

type series struct {
	T        []int64 `json:"t"` // unix milliseconds
	Limit    []int   `json:"limit"`
	Inflight []int   `json:"inflight"`
	Queued   []int   `json:"queued"`
}

// NewStatusPage returns the status page of s, keeping window samples per
// provider (600 when <= 0: ten minutes at one sample per second).
func NewStatusPage(s *Server, window int) *StatusPage {
	if window <= 0 {
		window = 600
	}
	return &StatusPage{srv: s, window: window, hist: make(map[string]*series)}
}

// Run samples every interval until ctx is done.
func (sp *StatusPage) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	sp.Sample()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sp.Sample()
		}
	}
}

// Sample records one point per provider now.
func (sp *StatusPage) Sample() {
	snap := sp.srv.snap.Load()
	now := time.Now().UnixMilli()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	seen := make(map[string]bool, len(snap.providers))
	for _, p := range snap.providers {
		st := p.limiter.Stats()
		h := sp.hist[p.name]
		if h == nil {
			h = &series{}
			sp.hist[p.name] = h
		}
		h.T = appendBounded(h.T, now, sp.window)
		h.Limit = appendBounded(h.Limit, st.Limit, sp.window)
		h.Inflight = appendBounded(h.Inflight, st.Inflight, sp.window)
		h.Queued = appendBounded(h.Queued, st.Waiting, sp.window)
		seen[p.name] = true
	}
	for name := range sp.hist {
		if !seen[name] {
			delete(sp.hist, name)
		}
	}
}

func appendBounded[T any](s []T, v T, n int) []T {
	if len(s) >= n {
		copy(s, s[len(s)-n+1:])
		s = s[:n-1]
	}
	return append(s, v)
}

func (sp *StatusPage) serveHistory(ctx *fasthttp.RequestCtx) {
	sp.mu.Lock()
	b, err := json.Marshal(map[string]any{"providers": sp.hist})
	sp.mu.Unlock()
	if err != nil {
		ctx.Error(err.Error(), fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetContentType("application/json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetBody(b)
}

func serveStatusPage(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/html; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	// Everything is inline: no external script, style or font.
	ctx.Response.Header.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	ctx.SetBody(statusPageHTML)
}

// ObservabilityHandler serves the admin listener's observability paths:
// /metrics (when m is not nil), /admin/ (the status page) and
// /admin/history (when sp is not nil); anything else is 404. Pass it as
// AdminHandler's extra handler.
func ObservabilityHandler(m *Metrics, sp *StatusPage) fasthttp.RequestHandler {
	var metrics fasthttp.RequestHandler
	if m != nil {
		metrics = m.Handler()
	}
	return func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/metrics":
			if metrics != nil {
				metrics(ctx)
				return
			}
		case "/admin", "/admin/":
			if string(ctx.Path()) == "/admin" {
				ctx.Redirect("/admin/", fasthttp.StatusMovedPermanently)
				return
			}
			serveStatusPage(ctx)
			return
		case "/admin/history":
			if sp != nil {
				sp.serveHistory(ctx)
				return
			}
		}
		ctx.NotFound()
	}
}
