package proxy

import (
	"encoding/json"

	"github.com/valyala/fasthttp"
)

// AdminHandler serves the admin listener: /healthz (the process is up),
// /readyz (a config is applied and the server is not draining) and
// /admin/status (per-provider limiter state as JSON). extra, when not nil,
// handles every other path (metrics, the status page).
func (s *Server) AdminHandler(extra fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/healthz":
			ctx.SetContentType("text/plain; charset=utf-8")
			ctx.SetBodyString("ok\n")
		case "/readyz":
			ctx.SetContentType("text/plain; charset=utf-8")
			if s.Ready() {
				ctx.SetBodyString("ready\n")
			} else {
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
				ctx.SetBodyString("not ready\n")
			}
		case "/admin/status":
			ctx.SetContentType("application/json")
			b, err := json.MarshalIndent(map[string]any{"providers": s.Status(), "live_requests": s.Live()}, "", "  ")
			if err != nil {
				ctx.Error(err.Error(), fasthttp.StatusInternalServerError)
				return
			}
			ctx.SetBody(append(b, '\n'))
		default:
			if extra != nil {
				extra(ctx)
				return
			}
			ctx.NotFound()
		}
	}
}
