package proxy

import (
	"github.com/valyala/fasthttp"
)

// AdminHandler serves the admin listener: /healthz (the process is up),
// /readyz (a config is applied and the server is not draining) and
// /admin/status (per-provider limits, their parts, in flight, queued, TTFT,
// token rate, last drop and Retry-After freeze as JSON: StatusReport).
// extra, when not nil, handles every other path (ObservabilityHandler:
// /metrics and the status page).
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
			s.serveStatusJSON(ctx)
		default:
			if extra != nil {
				extra(ctx)
				return
			}
			ctx.NotFound()
		}
	}
}
