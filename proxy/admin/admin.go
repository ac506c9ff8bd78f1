// Package admin is Sluice's operator side: the admin listener's endpoints
// (/healthz, /readyz, /metrics, /admin/status, the status page and its
// history), the metrics read from the limiters at scrape time, the config
// reload metrics, and tracing set up from the OTEL_* environment. It reads
// the proxy through its public API only (proxy.Server.Providers, Live,
// Ready); the request path never imports it. cmd/sluice wires it.
package admin

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/sluicehq/sluice/adaptive/cluster"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// Options say what the admin listener serves besides health and status.
type Options struct {
	// Registry is served on /metrics; nil: no /metrics (404).
	Registry *prometheus.Registry
	// History is charted by the status page; nil: no /admin/history
	// (the page then charts from the moment it was opened).
	History *History
	// Token, when set, is required on every path but /healthz and
	// /readyz (see requireToken); unset: no authentication.
	Token config.Secret
	// Cluster is the fleet coordinator's view (adaptive/cluster), shown
	// in /admin/status and on the page; nil without a cluster block.
	Cluster func() cluster.Status
}

// Handler serves the admin listener:
//
//   - /healthz: the process is up;
//   - /readyz: a config is applied, the server is not draining and the
//     fleet coordinator has no reason against it (cluster.Status.NotReady;
//     else 503);
//   - /admin/status: every provider's limit, its parts and what binds it,
//     in flight, queued, TTFT, token rate, last drop and Retry-After
//     freeze, as JSON (StatusReport);
//   - /admin/ (the status page) and /admin/history;
//   - /metrics, in the Prometheus text or negotiated format.
//
// With o.Token set, every path but /healthz and /readyz requires it.
func Handler(srv *proxy.Server, o Options) fasthttp.RequestHandler {
	h := handler(srv, o)
	if o.Token.IsSet() {
		return requireToken(o.Token, h)
	}
	return h
}

func handler(srv *proxy.Server, o Options) fasthttp.RequestHandler {
	var metrics fasthttp.RequestHandler
	if o.Registry != nil {
		h := promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry, EnableOpenMetrics: true})
		metrics = fasthttpadaptor.NewFastHTTPHandler(h)
	}
	return func(ctx *fasthttp.RequestCtx) {
		switch string(ctx.Path()) {
		case "/healthz":
			ctx.SetContentType("text/plain; charset=utf-8")
			ctx.SetBodyString("ok\n")
		case "/readyz":
			ctx.SetContentType("text/plain; charset=utf-8")
			why := ""
			if o.Cluster != nil {
				why = o.Cluster().NotReady()
			}
			switch {
			case !srv.Ready():
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
				ctx.SetBodyString("not ready\n")
			case why != "":
				ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
				ctx.SetBodyString("not ready: " + why + "\n")
			default:
				ctx.SetBodyString("ready\n")
			}
		case "/admin/status":
			serveStatusJSON(ctx, srv, o.Cluster)
		case "/admin":
			ctx.Redirect("/admin/", fasthttp.StatusMovedPermanently)
		case "/admin/":
			serveStatusPage(ctx)
		case "/admin/history":
			if o.History == nil {
				ctx.NotFound()
				return
			}
			o.History.serve(ctx)
		case "/metrics":
			if metrics == nil {
				ctx.NotFound()
				return
			}
			metrics(ctx)
		default:
			ctx.NotFound()
		}
	}
}
