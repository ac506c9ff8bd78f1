package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel"

	"github.com/sluicehq/sluice/adaptive/cluster"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/proxy/admin"
)

// serveFlags defines serve's flags on fs and returns the command.
func serveFlags(fs *flag.FlagSet) func(stdout, stderr io.Writer) int {
	path := fs.String("config", "sluice.yaml", "the config `FILE`, reloaded when it changes and on SIGHUP")
	logLevel := fs.String("log-level", "info", "`LEVEL` of the JSON log on stderr: debug, info, warn or error")
	return func(_, stderr io.Writer) int {
		var lvl slog.Level
		if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
			fmt.Fprintf(stderr, "sluice serve: -log-level: %v\n", err)
			return exitUsage
		}
		return serve(*path, lvl)
	}
}

// serve runs the proxy on the config file at path until SIGTERM or SIGINT.
func serve(path string, lvl slog.Level) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))

	app := &app{log: log}
	watcher := config.NewWatcher(path, config.DefaultDebounce, app.reload, app.reloadFailed)
	cfg, err := watcher.Load()
	if err != nil {
		printErrors(os.Stderr, err)
		return 1
	}

	// Telemetry: metrics on an injected registry (never the global one),
	// traces from the OTEL_* environment overridden by the tracing block.
	reg := admin.NewRegistry()
	metrics, err := proxy.NewMetrics(reg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice: metrics: %v\n", err)
		return 1
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "error", err.Error()) }))
	tp, stopTracing, err := admin.NewTracerProvider(context.Background(), cfg.Tracing, buildInfo().Version)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice: %v\n", err)
		return 1
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(ctx); err != nil {
			log.Warn("flushing traces", "error", err.Error())
		}
	}()

	srv := proxy.New(proxy.Options{Logger: log, Metrics: metrics, TracerProvider: tp})
	reloads, err := admin.Register(reg, srv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice: metrics: %v\n", err)
		return 1
	}
	app.srv, app.reloads, app.reg, app.tracing, app.adminCfg = srv, reloads, reg, cfg.Tracing, cfg.Admin
	app.listenerCfg = listenerSettings{cfg.Listen, cfg.Server.MaxConnections, cfg.Server.ReadTimeout, cfg.Server.IdleTimeout}
	if cfg.TLS.KeyPair != nil {
		app.certs = newCertStore(cfg.TLS.KeyPair)
		if err := reg.Register(app.certs.expiryMetric()); err != nil {
			fmt.Fprintf(os.Stderr, "sluice: metrics: %v\n", err)
			return 1
		}
		log.Info("TLS on the client listener", "certificate", cfg.TLS.KeyPair)
	}
	for _, w := range warnings(cfg) {
		log.Warn(w)
	}
	if err := srv.Apply(cfg); err != nil {
		printErrors(os.Stderr, err)
		return 1
	}
	reloads.Record(true, time.Now())
	fl, err := startFleet(cfg.Cluster, srv, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sluice: %v\n", err)
		return 1
	}
	if fl != nil {
		defer fl.stop() // after shutdown: the last leases are released, then the replica leaves
		if err := admin.RegisterCluster(reg, fl.co); err != nil {
			fmt.Fprintf(os.Stderr, "sluice: metrics: %v\n", err)
			return 1
		}
		app.fleet = fl.co
	}
	app.clusterCfg = cfg.Cluster
	app.history = admin.NewHistory(srv, 0)
	code := runServer(app, cfg, func(ctx context.Context) {
		go app.history.Run(ctx, time.Second)
		go func() { _ = watcher.Run(ctx) }()
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			defer signal.Stop(hup)
			for {
				select {
				case <-hup:
					log.Info("SIGHUP: reloading config", "path", path)
					watcher.Reload()
				case <-ctx.Done():
					return
				}
			}
		}()
	})
	return code
}

type app struct {
	srv         *proxy.Server
	log         *slog.Logger
	reg         *prometheus.Registry
	reloads     *admin.Reloads
	history     *admin.History
	tracing     config.Tracing       // in force since startup
	adminCfg    config.Admin         // in force since startup
	listenerCfg listenerSettings     // in force since startup
	certs       *certStore           // the client listener's certificate; nil: plain HTTP
	clusterCfg  config.Cluster       // in force since startup
	fleet       *cluster.Coordinator // nil without a cluster block
}

// listenerSettings are the settings the client listener is built with at
// start; a reload cannot change them.
type listenerSettings struct {
	listen   string
	maxConns int
	readTO   time.Duration
	idleTO   time.Duration
}

func (a *app) reload(cfg *config.Config) {
	for _, w := range cfg.Warnings {
		a.log.Warn(w)
	}
	if err := a.srv.Apply(cfg); err != nil {
		a.reloads.Record(false, time.Now())
		a.log.Error("config reload rejected; the previous config keeps serving", "error", err.Error())
		return
	}
	a.reloads.Record(true, time.Now())
	if cfg.Tracing != a.tracing {
		a.log.Warn("tracing settings changed; they take effect at the next restart")
	}
	if (listenerSettings{cfg.Listen, cfg.Server.MaxConnections, cfg.Server.ReadTimeout, cfg.Server.IdleTimeout}) != a.listenerCfg {
		a.log.Warn("listen, server.max_connections, server.read_timeout or server.idle_timeout changed; they take effect at the next restart")
	}
	if cfg.Admin != a.adminCfg {
		a.log.Warn("admin settings changed; they take effect at the next restart")
	}
	switch {
	case (a.certs != nil) != cfg.TLS.Enabled():
		a.log.Warn("tls turned on or off; that takes effect at the next restart")
	case a.certs != nil:
		if a.certs.set(cfg.TLS.KeyPair) {
			a.log.Info("TLS certificate replaced; new connections get it", "certificate", cfg.TLS.KeyPair)
		}
	}
	if cfg.Cluster != a.clusterCfg {
		a.log.Warn("cluster settings changed; they take effect at the next restart")
	}
	a.log.Info("config reloaded", "path", cfg.Path, "providers", len(cfg.Providers))
}

// fleetStatus is what the admin endpoints show of the fleet; nil without
// a cluster block.
func (a *app) fleetStatus() func() cluster.Status {
	if a.fleet == nil {
		return nil
	}
	return a.fleet.Status
}

func (a *app) reloadFailed(err error) {
	a.reloads.Record(false, time.Now())
	a.log.Error("config reload rejected; the previous config keeps serving", "error", err.Error())
}

// runServer listens, serves until SIGTERM or SIGINT, then shuts down
// gracefully: stop accepting, let streams finish within shutdown.grace, cut
// what is left, exit 0. started runs once the listeners are up, with a
// context cancelled at shutdown.
func runServer(a *app, cfg *config.Config, started func(ctx context.Context)) int {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		a.log.Error("listen", "addr", cfg.Listen, "error", err.Error())
		return 1
	}
	if a.certs != nil {
		ln = tlsListener(ln, a.certs)
	}
	fs := proxy.NewFastHTTPServer(a.srv)
	adminSrv, adminLn, err := a.startAdmin(cfg)
	if err != nil {
		a.log.Error("admin listen", "addr", cfg.Admin.Listen, "error", err.Error())
		ln.Close()
		return 1
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- fs.Serve(ln) }()
	a.log.Info("sluice serving", "listen", ln.Addr().String(), "tls", a.certs != nil, "admin", addrOf(adminLn), "providers", len(cfg.Providers))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if started != nil {
		started(ctx)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(stop)
	select {
	case sig := <-stop:
		a.log.Info("shutting down", "signal", sig.String(), "grace", a.srv.Config().Shutdown.Grace.String(), "live", a.srv.Live())
	case err := <-serveErr:
		if err != nil {
			a.log.Error("serve", "error", err.Error())
			return 1
		}
	}
	go forceExitOnSignal(a.log, stop)
	grace := a.srv.Config().Shutdown.Grace
	graceEnd := time.Now().Add(grace)
	cancel()
	shutdown(a, fs, grace)
	if adminSrv != nil {
		stopAdmin(adminSrv, graceEnd)
	}
	return 0
}

// forceExitOnSignal ends the process at once, exit status 1, on a second
// SIGTERM or SIGINT during the graceful stop: an operator who asks twice
// does not want to wait for shutdown.grace. Open streams end truncated.
func forceExitOnSignal(log *slog.Logger, stop <-chan os.Signal) {
	sig := <-stop
	log.Warn("second signal: exiting now without waiting for requests in flight", "signal", sig.String())
	os.Exit(1)
}

// startAdmin starts the admin listener unless it is off.
func (a *app) startAdmin(cfg *config.Config) (*fasthttp.Server, net.Listener, error) {
	if cfg.Admin.Listen == config.AdminOff || cfg.Admin.Listen == "" {
		return nil, nil, nil
	}
	ln, err := net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		return nil, nil, err
	}
	srv := &fasthttp.Server{
		Handler:               admin.Handler(a.srv, admin.Options{Registry: a.reg, History: a.history, Token: cfg.Admin.Token, Cluster: a.fleetStatus()}),
		Name:                  "sluice-admin",
		ReadTimeout:           10 * time.Second,
		NoDefaultServerHeader: true,
		Logger:                proxy.FastHTTPLogger(a.log),
	}
	go func() { _ = srv.Serve(ln) }()
	return srv, ln, nil
}

// adminDrain is the longest the admin listener waits for its open
// requests once the proxy has stopped: they are probes and scrapes, done
// in milliseconds.
const adminDrain = time.Second

// stopAdmin closes the admin listener after the proxy's shutdown, so that
// /readyz reports 503 to the end. Its open requests get adminDrain, less
// what is left of the grace period, so that a half-sent request (the
// listener's read timeout is 10 s) cannot hold the exit past
// shutdown.grace.
func stopAdmin(srv *fasthttp.Server, graceEnd time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), max(0, min(adminDrain, time.Until(graceEnd))))
	defer cancel()
	_ = srv.ShutdownWithContext(ctx)
}

// shutdown stops accepting, waits up to grace for streams to end, then cuts
// the rest.
func shutdown(a *app, fs *fasthttp.Server, grace time.Duration) {
	a.srv.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	err := fs.ShutdownWithContext(ctx)
	cancel()
	if errors.Is(err, context.DeadlineExceeded) {
		n := a.srv.CutStreams()
		a.log.Warn("grace period over: cut streams still open", "cut", n)
		// Cut streams end within a moment: wait for them to be released.
		for deadline := time.Now().Add(5 * time.Second); a.srv.Live() > 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	}
	a.srv.Close()
	a.log.Info("stopped")
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return "off"
	}
	return ln.Addr().String()
}
