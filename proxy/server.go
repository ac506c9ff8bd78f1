// Package proxy is Sluice's request path: routing, admission through each
// provider's limiter, the upstream round trip, streaming the response back
// event by event, and the admin endpoints.
package proxy

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// Options configure a Server. Zero values are usable.
type Options struct {
	// Now is the clock; nil means time.Now. Tests inject their own.
	Now func() time.Time
	// Logger receives errors and lifecycle events; nil discards them.
	Logger *slog.Logger
	// Metrics receives the request path's metrics; nil turns them off.
	Metrics *Metrics
	// TracerProvider makes a server span per request and a client span per
	// upstream attempt; nil turns tracing off (a client's traceparent is
	// then forwarded unchanged).
	TracerProvider trace.TracerProvider
}

// Server is the proxy. Apply a config before serving; Apply again to
// reload: the new routing table is swapped in atomically and requests in
// flight finish on the snapshot they started with.
type Server struct {
	opts  Options
	now   func() time.Time
	log   *slog.Logger
	watch *watcher
	snap  atomic.Pointer[snapshot]

	// State that survives reloads: the admission stacks (limiters, rate
	// layers, upstreams, retry budgets; by provider name, kept by the
	// registry) and the upstream pools (by clientKey: one per upstream of
	// each provider).
	limiters *adaptive.Registry
	mu       sync.Mutex // serialises Apply and Close
	clients  map[string]*fasthttp.HostClient
	// applying is set while Apply runs: it raises the limits (which
	// grants waiters) before it stores the new snapshot (currentAfterWait).
	applying atomic.Bool

	budget   budget    // server.max_buffered_bytes, shared by every request
	lingers  lingerSet // connections closing after a refusal of an unread body (linger.go)
	conns    connTable // client connections, for the connection caps (conns.go)
	draining atomic.Bool
	tracer   trace.Tracer     // nil: tracing off
	sampler  sdktrace.Sampler // sampling decided before the SDK (TracerProvider); nil: by the SDK
}

// funcClock adapts the server's clock for adaptive.
type funcClock func() time.Time

func (f funcClock) Now() time.Time { return f() }

// snapshot is one applied config: immutable, swapped as a whole.
type snapshot struct {
	cfg          *config.Config
	router       *router
	providers    []*provider
	byName       map[string]*provider
	noRoute      *errorBodies
	serverLimits *serverLimits
	clients      *clientRules // who a request comes from (clients.go)
	applied      time.Time
}

// serverLimits are the server block's settings the request path reads per
// request (or connection), resolved at Apply: body sizes and deadlines,
// the client write timeout and the per-address connection cap.
type serverLimits struct {
	maxRequestBody  int
	maxResponseBody int
	writeTimeout    int64 // nanoseconds; see stream.keepWriting
	bodyTimeout     time.Duration
	minBodyRate     int64 // bytes per second; 0: none
	readTimeout     time.Duration
	maxConnsPerIP   int // 0: no cap
}

func newServerLimits(sc config.Server) *serverLimits {
	return &serverLimits{
		maxRequestBody:  int(sc.MaxRequestBody),
		maxResponseBody: int(sc.MaxResponseBody),
		writeTimeout:    int64(sc.WriteTimeout),
		bodyTimeout:     sc.BodyTimeout,
		minBodyRate:     int64(sc.MinBodyRate),
		readTimeout:     sc.ReadTimeout,
		maxConnsPerIP:   sc.MaxConnsPerIP,
	}
}

// New returns a Server with no config applied: every request gets 404 until
// Apply succeeds.
func New(opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		limiters: adaptive.NewRegistry(funcClock(opts.Now)),
		opts:     opts,
		now:      opts.Now,
		log:      opts.Logger,
		watch:    newWatcher(),
		clients:  make(map[string]*fasthttp.HostClient),
	}
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(TracerName)
		if tp, ok := opts.TracerProvider.(*TracerProvider); ok {
			s.sampler = tp.sampler
		}
	}
	s.snap.Store(&snapshot{router: newRouter(nil), noRoute: buildErrorBodies(""), byName: map[string]*provider{}, serverLimits: &serverLimits{},
		clients: newClientRules(settings.Clients{})})
	return s
}

// Apply builds everything the request path needs from cfg, then swaps it in
// with one atomic store. On error nothing changes. The limiters are the
// registry's: providers whose name is unchanged keep theirs, with permits in
// use, waiters and the learned limit (see adaptive.Registry.Reconcile).
func (s *Server) Apply(cfg *config.Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applying.Store(true)
	defer s.applying.Store(false)

	// Everything that can fail first: upstream pools, then the limiters
	// (all or nothing).
	clients, pools, err := s.upstreamPools(cfg)
	if err != nil {
		return err
	}
	want := make(map[string]adaptive.ProviderSettings, len(cfg.Providers))
	for i := range cfg.Providers {
		want[cfg.Providers[i].Name] = providerSettings(&cfg.Providers[i])
	}
	adm, err := s.limiters.ReconcileProviders(want)
	if err != nil {
		return err
	}

	// Commit.
	next := &snapshot{cfg: cfg, byName: make(map[string]*provider, len(cfg.Providers)), noRoute: buildErrorBodies(""), applied: s.now(),
		serverLimits: newServerLimits(cfg.Server), clients: newClientRules(cfg.Clients)}
	var routes []route
	for i := range cfg.Providers {
		pc := &cfg.Providers[i]
		p := buildProvider(pc, adm[pc.Name], pools[i])
		p.flows = newFlowRules(pc.Queue)
		p.flows.own = append(p.flows.own, next.clients.strip...)
		p.policies = policiesAt(cfg.Clients, p)
		next.providers = append(next.providers, p)
		next.byName[p.name] = p
		var host, prefix []byte
		if pc.Match.Host != "" {
			host = []byte(pc.Match.Host)
		}
		if pc.Match.PathPrefix != "" {
			prefix = []byte(pc.Match.PathPrefix)
		}
		routes = append(routes, route{host: host, prefix: prefix, p: p})
	}
	next.router = newRouter(routes)
	s.buildTelemetry(next.providers)
	for key, hc := range s.clients {
		if _, ok := clients[key]; !ok {
			hc.CloseIdleConnections()
		}
	}
	s.clients = clients
	s.budget.limit.Store(int64(cfg.Server.MaxBufferedBytes))
	s.snap.Store(next)
	if s.opts.Metrics != nil {
		s.opts.Metrics.retain(next.byName)
	}
	return nil
}

// Config returns the config in force (nil before the first Apply).
func (s *Server) Config() *config.Config { return s.snap.Load().cfg }

// Ready reports whether a config is applied and the server is not draining.
func (s *Server) Ready() bool { return s.snap.Load().cfg != nil && !s.draining.Load() }

// Drain marks the server as shutting down: /readyz fails and requests that
// still arrive on open keep-alive connections get 503.
func (s *Server) Drain() { s.draining.Store(true) }

// Live returns the number of requests between admission and the end of
// their response.
func (s *Server) Live() int { return s.watch.live() }

// CutStreams ends every request still in flight: queued requests get 503,
// streams are closed at once (clients see a truncated stream). Used when
// the shutdown grace period is over. Returns how many were cut.
func (s *Server) CutStreams() int { return s.watch.cutAll() }

// Close stops the disconnect watcher, ends the connections still
// lingering after a refusal, and closes idle upstream connections. Call it
// after the listeners have stopped and CutStreams has run.
func (s *Server) Close() {
	s.watch.close()
	s.lingers.close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, hc := range s.clients {
		hc.CloseIdleConnections()
	}
}
