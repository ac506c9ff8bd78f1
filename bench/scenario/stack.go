package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/proxy"
)

// stack is one variant's world: a simulated provider, Sluice in front of it
// on its own loopback listener, and the live counters the sampler reads.
type stack struct {
	v       Variant
	sc      *Scenario
	scale   float64
	ceiling int // limit.ceiling at the start

	sim    *sim.Server
	simLn  net.Listener
	simURL string

	proxy *proxy.Server
	fs    *fasthttp.Server
	ln    net.Listener
	url   string // the load's target, through Sluice

	served sync.WaitGroup
	live   live
}

// live accumulates client-side events between two samples, and the
// provider-side TTFT of every request (from Sluice's Finished hook).
type live struct {
	mu    sync.Mutex
	ttfts []time.Duration // real time
	ok    int

	upMu      sync.Mutex
	upstreamT []time.Duration // real time from permit to first token
	upWindow  []time.Duration // the same, since the last sample
}

// finished is Sluice's Finished hook: it keeps the TTFT measured from the
// moment the permit was granted (the provider's share, no queue wait).
func (l *live) finished(e proxy.RequestEnd) {
	if e.TTFT <= 0 {
		return
	}
	l.upMu.Lock()
	l.upstreamT = append(l.upstreamT, e.TTFT)
	l.upWindow = append(l.upWindow, e.TTFT)
	l.upMu.Unlock()
}

func (l *live) firstToken(d time.Duration) {
	l.mu.Lock()
	l.ttfts = append(l.ttfts, d)
	l.mu.Unlock()
}

func (l *live) end(r *load.Record) {
	if r.Outcome != load.OK {
		return
	}
	l.mu.Lock()
	l.ok++
	l.mu.Unlock()
}

// take returns and resets what accumulated since the last call.
func (l *live) take() ([]time.Duration, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.ttfts, l.ok
	l.ttfts, l.ok = nil, 0
	return t, ok
}

// newStack starts the provider and Sluice for variant v.
func newStack(sc *Scenario, v Variant, scale float64, seed uint64) (_ *stack, err error) {
	st := &stack{v: v, sc: sc, scale: scale, ceiling: sc.Ceiling}
	if v.Oracle {
		// The config holds the largest limit the oracle will need (so the
		// upstream pool, sized from limit.ceiling, is large enough), and
		// setCeiling lowers the limiter to the first step before the load
		// starts.
		st.ceiling = 0
		for _, step := range sc.oracleSteps() {
			st.ceiling = max(st.ceiling, step.Capacity)
		}
	}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	simCfg := sc.Sim
	simCfg.Schedule = slices.Clone(sc.Sim.Schedule)
	simCfg.TimeScale = scale
	simCfg.Seed = seed
	st.sim = sim.New(simCfg)
	if st.simLn, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	st.simURL = "http://" + st.simLn.Addr().String()
	st.served.Go(func() { _ = st.sim.Serve(st.simLn) })

	st.proxy = proxy.New(proxy.Options{})
	st.proxy.SetHooks(&proxy.Hooks{Finished: st.live.finished})
	if err := st.proxy.Apply(providerConfig(sc, v, st.simURL, st.ceiling, scale)); err != nil {
		return nil, fmt.Errorf("%s: config: %w", v.Name, err)
	}
	if v.Oracle {
		if err := st.setCeiling(sc.oracleSteps()[0].Capacity); err != nil {
			return nil, err
		}
	}
	st.fs = proxy.NewFastHTTPServer(st.proxy)
	// fasthttp's worker-pool janitor outlives Serve by this long.
	st.fs.MaxIdleWorkerDuration = 100 * time.Millisecond
	if st.ln, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	st.url = "http://" + st.ln.Addr().String() + "/sim/v1/chat/completions"
	st.served.Go(func() { _ = st.fs.Serve(st.ln) })
	return st, nil
}

// setCeiling sets the oracle's limit: it reconfigures the provider's
// limiter directly (its fixed controller stays at the configured maximum,
// the new ceiling clamps it), keeping the queue settings. A config reload
// would do the same, but Sluice keys its upstream pool by limit.ceiling, so
// requests queued across the reload would use the old, smaller pool.
func (st *stack) setCeiling(c int) error {
	lim := st.proxy.Limiter("sim")
	if lim == nil {
		return errors.New("oracle: no limiter for provider sim")
	}
	q := st.proxy.Config().Providers[0].Queue
	lim.Reconfigure(adaptive.Options{Ceiling: max(c, 1), MaxWaiting: q.MaxWaiting, MaxWait: q.MaxWait})
	return nil
}

// sample reads the provider's and Sluice's state now.
func (st *stack) sample() VariantSample {
	ss := st.sim.Stats()
	vs := VariantSample{
		Capacity:         ss.Capacity,
		Running:          ss.Running,
		Queued:           ss.Queued,
		UpstreamRejected: ss.Rejected429 + ss.Rejected529,
	}
	if lim := st.proxy.Limiter("sim"); lim != nil {
		ls := lim.Stats()
		vs.Limit, vs.Inflight, vs.Waiting = ls.Limit, ls.Inflight, ls.Waiting
		vs.SluiceRejected = ls.RejectedFull + ls.RejectedTimeout
		if c := lim.Controller(); c != nil {
			vs.Binding = c.State().Binding
		}
	}
	ttfts, ok := st.live.take()
	vs.OK = ok
	if len(ttfts) > 0 {
		slices.Sort(ttfts)
		vs.TTFTCount = len(ttfts)
		vs.TTFTP50 = toModel(pick(ttfts, 0.50), st.scale)
		vs.TTFTP99 = toModel(pick(ttfts, 0.99), st.scale)
	}
	st.live.upMu.Lock()
	up := st.live.upWindow
	st.live.upWindow = nil
	st.live.upMu.Unlock()
	if len(up) > 0 {
		slices.Sort(up)
		vs.ProviderTTFTP50 = toModel(pick(up, 0.50), st.scale)
		vs.ProviderTTFTP99 = toModel(pick(up, 0.99), st.scale)
	}
	return vs
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
	if st.sim != nil {
		_ = st.sim.Close()
	} else if st.simLn != nil {
		st.simLn.Close()
	}
	st.served.Wait()
}

// pick returns the q-quantile of sorted values (nearest rank).
func pick(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// toModel converts a real duration to model time.
func toModel(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) / scale)
}
