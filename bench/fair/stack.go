package fair

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// stack is one simulated provider with Sluice in front of it on loopback,
// and the log of Sluice's server spans.
type stack struct {
	sim   *sim.Server
	simLn net.Listener
	proxy *proxy.Server
	tp    *sdktrace.TracerProvider
	fs    *fasthttp.Server
	ln    net.Listener
	url   string // the load's target, through Sluice
	spans *spanLog

	served sync.WaitGroup
}

// newStack starts a provider with simCfg and Sluice in front of it with
// one provider "sim" at /sim, configured by mut from Sluice's defaults.
func newStack(simCfg sim.Config, mut func(p *config.Provider)) (_ *stack, err error) {
	st := &stack{spans: &spanLog{}}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	st.sim = sim.New(simCfg)
	if st.simLn, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	st.served.Go(func() { _ = st.sim.Serve(st.simLn) })

	st.tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(st.spans))
	st.proxy = proxy.New(proxy.Options{TracerProvider: st.tp})
	p := config.DefaultProvider()
	p.Name, p.Upstream, p.Match.PathPrefix = "sim", "http://"+st.simLn.Addr().String(), "/sim"
	mut(&p)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = config.AdminOff
	cfg.Shutdown.Grace = 0
	cfg.Tracing.Exporter = "none"
	cfg.Providers = []config.Provider{p}
	if err = st.proxy.Apply(cfg); err != nil {
		return nil, err
	}
	if st.ln, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	st.fs = proxy.NewFastHTTPServer(st.proxy)
	st.fs.MaxIdleWorkerDuration = 100 * time.Millisecond
	st.served.Go(func() { _ = st.fs.Serve(st.ln) })
	st.url = "http://" + st.ln.Addr().String() + "/sim/v1/chat/completions"
	return st, nil
}

// close stops Sluice (cutting what is left) and the provider.
func (st *stack) close() {
	if st.proxy != nil {
		st.proxy.Drain()
		st.proxy.CutStreams()
	}
	if st.fs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = st.fs.ShutdownWithContext(ctx)
		cancel()
	} else if st.ln != nil {
		st.ln.Close()
	}
	if st.proxy != nil {
		st.proxy.CutStreams()
		st.proxy.Close()
	}
	if st.tp != nil {
		_ = st.tp.Shutdown(context.Background())
	}
	if st.sim != nil {
		_ = st.sim.Close()
	} else if st.simLn != nil {
		st.simLn.Close()
	}
	st.served.Wait()
}
