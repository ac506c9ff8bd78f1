package admin

import (
	"context"
	_ "embed"
	"encoding/json"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/proxy"
)

//go:embed ui/index.html
var statusPageHTML []byte

// History keeps a short history of each provider's limit, in-flight and
// queue depth for the status page's chart (/admin/history). The page works
// without it (it then charts from the moment it was opened); Run records
// it.
type History struct {
	srv    *proxy.Server
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

// NewHistory returns the history of srv, keeping window samples per
// provider (600 when <= 0: ten minutes at one sample per second).
func NewHistory(srv *proxy.Server, window int) *History {
	if window <= 0 {
		window = 600
	}
	return &History{srv: srv, window: window, hist: make(map[string]*series)}
}

// Run samples every interval until ctx is done.
func (sp *History) Run(ctx context.Context, interval time.Duration) {
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
func (sp *History) Sample() {
	ps := sp.srv.Providers()
	now := time.Now().UnixMilli()
	sp.mu.Lock()
	defer sp.mu.Unlock()
	seen := make(map[string]bool, len(ps))
	for _, p := range ps {
		st := p.Limiter
		h := sp.hist[p.Name]
		if h == nil {
			h = &series{}
			sp.hist[p.Name] = h
		}
		h.T = appendBounded(h.T, now, sp.window)
		h.Limit = appendBounded(h.Limit, st.Limit, sp.window)
		h.Inflight = appendBounded(h.Inflight, st.Inflight, sp.window)
		h.Queued = appendBounded(h.Queued, st.Waiting, sp.window)
		seen[p.Name] = true
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

func (sp *History) serve(ctx *fasthttp.RequestCtx) {
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
