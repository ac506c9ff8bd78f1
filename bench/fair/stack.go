package fair

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluicehq/sluice/bench/inproc"
	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// stack is one simulated provider with Sluice in front of it on loopback
// (inproc), and the log of Sluice's server spans.
type stack struct {
	*inproc.Stack
	url   string // the load's target, through Sluice
	tp    *sdktrace.TracerProvider
	spans *spanLog
}

// newStack starts a provider with simCfg and Sluice in front of it with
// one provider "sim" at /sim, configured by mut from Sluice's defaults.
func newStack(simCfg sim.Config, mut func(p *config.Provider)) (*stack, error) {
	st := &stack{spans: &spanLog{}}
	st.tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(st.spans))
	in, err := inproc.Start(inproc.Options{
		Sim:   simCfg,
		Proxy: proxy.Options{TracerProvider: st.tp},
		Config: func(simURL string) *config.Config {
			p := config.DefaultProvider()
			p.Name, p.Upstream, p.Match.PathPrefix = "sim", simURL, "/sim"
			mut(&p)
			cfg := config.Default()
			cfg.Listen = "127.0.0.1:0"
			cfg.Admin.Listen = config.AdminOff
			cfg.Shutdown.Grace = 0
			cfg.Tracing.Exporter = "none"
			cfg.Providers = []config.Provider{p}
			// The scenarios' clients name their own class: trust them
			// with every class, as a clients: entry would.
			cfg.Clients.Default.MaxClass = p.Queue.Classes[0].Name
			return cfg
		},
	})
	if err != nil {
		_ = st.tp.Shutdown(context.Background())
		return nil, err
	}
	st.Stack, st.url = in, in.URL+"/sim/v1/chat/completions"
	return st, nil
}

// close stops Sluice (cutting what is left), its tracing and the provider.
func (st *stack) close() {
	st.Stack.Close()
	_ = st.tp.Shutdown(context.Background())
}
