package scenario

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluicehq/sluice/bench/inproc"
	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
	"github.com/sluicehq/sluice/config"
)

// stack is one variant's world: a simulated provider and Sluice in front of
// it (inproc), with its admin endpoint, and the live counters the sampler
// reads.
type stack struct {
	*inproc.Stack
	v       Variant
	sc      *Scenario
	scale   float64
	ceiling int // limit.ceiling at the start

	sim *sim.Server
	url string // the load's target, through Sluice

	live live
	// simTTFT holds the counts of the provider's TTFT histogram at the
	// previous sample.
	simTTFT []int64
}

// live accumulates client-side events between two samples.
type live struct {
	mu   sync.Mutex
	ttft *hdrhistogram.Histogram // client TTFT, µs real time; nil when empty
	ok   int
}

func (l *live) firstToken(d time.Duration) {
	l.mu.Lock()
	if l.ttft == nil {
		l.ttft = newHistogram()
	}
	_ = l.ttft.RecordValue(min(max(d.Microseconds(), 1), l.ttft.HighestTrackableValue()))
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

// take returns and resets what accumulated since the last call: the
// client TTFTs (nil if none) and the completed requests.
func (l *live) take() (*hdrhistogram.Histogram, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.ttft, l.ok
	l.ttft, l.ok = nil, 0
	return h, ok
}

// newHistogram holds durations in microseconds, 1 µs to 1 h, 3 significant
// figures, as bench/load and bench/sim keep them.
func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
}

// newStack starts the provider and Sluice for variant v.
func newStack(sc *Scenario, v Variant, scale float64, seed uint64) (*stack, error) {
	st := &stack{v: v, sc: sc, scale: scale, ceiling: sc.Ceiling}
	if v.Oracle {
		// The oracle starts at its first step; runOracle applies the others.
		st.ceiling = sc.oracleSteps()[0].Capacity
	}
	simCfg := sc.Sim
	simCfg.Schedule = slices.Clone(sc.Sim.Schedule)
	simCfg.TimeScale = scale
	simCfg.Seed = seed
	in, err := inproc.Start(inproc.Options{
		Sim:    simCfg,
		Config: func(simURL string) *config.Config { return providerConfig(sc, v, simURL, st.ceiling, scale) },
		Admin:  true,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", v.Name, err)
	}
	st.Stack, st.sim, st.url = in, in.Sim, in.URL+"/sim/v1/chat/completions"
	if v.Direct {
		st.url = in.SimURL + "/v1/chat/completions"
	}
	return st, nil
}

// setCeiling sets the oracle's limit to c: it applies the variant's config
// with limit.ceiling c, as an operator would by reloading. The fixed
// algorithm's limit is its ceiling; requests queued across the reload are
// sent with the new settings.
func (st *stack) setCeiling(c int) error {
	return st.Proxy.Apply(providerConfig(st.sc, st.v, st.SimURL, max(c, 1), st.scale))
}

// adminStatus is the part of Sluice's /admin/status document that bench
// reads; bench decodes the JSON, not Sluice's Go type.
type adminStatus struct {
	Providers []providerStatus `json:"providers"`
}

// providerStatus is one provider in adminStatus.
type providerStatus struct {
	Name     string `json:"name"`
	Limit    int    `json:"limit"`
	Inflight int    `json:"inflight"`
	Queued   int    `json:"queued"`
	// Binding names the part of the limit that sets it now.
	Binding          string `json:"binding"`
	RejectedFull     uint64 `json:"rejected_queue_full"`
	RejectedTimeout  uint64 `json:"rejected_queue_timeout"`
	RejectedDeadline uint64 `json:"rejected_queue_deadline"`
	Displaced        uint64 `json:"rejected_displaced"`
	// Rate is the rate layer: Sluice's rate 429s by scope, and requests
	// that could never fit.
	Rate struct {
		Limited  map[string]uint64 `json:"limited"`
		TooLarge uint64            `json:"too_large"`
	} `json:"rate"`
}

// status reads /admin/status.
func (st *stack) status() (*adminStatus, error) {
	var doc adminStatus
	if err := st.Status(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", st.v.Name, err)
	}
	return &doc, nil
}

// sample reads the provider's and Sluice's state now.
func (st *stack) sample() (VariantSample, error) {
	ss := st.sim.Stats()
	vs := VariantSample{
		Capacity:         ss.Capacity,
		Running:          ss.Running,
		Queued:           ss.Queued,
		UpstreamRejected: ss.Rejected429 + ss.Rejected529,
		UpstreamRequests: ss.Requests,
		QuotaRequests:    ss.QuotaRequests,
		QuotaTokens:      ss.QuotaTokens,
	}
	if st.v.Direct {
		// No limit, no queue: what is in flight is what the provider holds.
		vs.Inflight = ss.Running + ss.Queued
	} else if err := st.sluiceSample(&vs); err != nil {
		return vs, err
	}

	ttft, ok := st.live.take()
	vs.OK = ok
	if ttft != nil {
		vs.TTFTCount = int(ttft.TotalCount())
		vs.TTFTP50, vs.TTFTP99 = st.p50p99(ttft)
	}
	cur := st.sim.TTFT().Export()
	if win := since(cur, st.simTTFT); win.TotalCount() > 0 {
		vs.ProviderTTFTP50, vs.ProviderTTFTP99 = st.p50p99(win)
	}
	st.simTTFT = cur.Counts
	return vs, nil
}

// sluiceSample adds Sluice's state, from /admin/status, to vs.
func (st *stack) sluiceSample(vs *VariantSample) error {
	doc, err := st.status()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(doc.Providers, func(p providerStatus) bool { return p.Name == providerName })
	if i < 0 {
		return fmt.Errorf("%s: /admin/status has no provider %q", st.v.Name, providerName)
	}
	p := doc.Providers[i]
	vs.Limit, vs.Inflight, vs.Waiting, vs.Binding = p.Limit, p.Inflight, p.Queued, p.Binding
	vs.SluiceRejected = p.RejectedFull + p.RejectedTimeout + p.RejectedDeadline + p.Displaced + p.Rate.TooLarge
	for _, n := range p.Rate.Limited {
		vs.SluiceRejected += n
	}
	return nil
}

// since returns the histogram of what cur holds beyond prev, the counts of
// an earlier snapshot of the same histogram (all of cur when prev is nil).
func since(cur *hdrhistogram.Snapshot, prev []int64) *hdrhistogram.Histogram {
	win := *cur
	win.Counts = slices.Clone(cur.Counts)
	for i := range min(len(prev), len(win.Counts)) {
		win.Counts[i] -= prev[i]
	}
	return hdrhistogram.Import(&win)
}

// p50p99 returns the median and 99th percentile of h (µs real time) in
// model time, in one pass over h.
func (st *stack) p50p99(h *hdrhistogram.Histogram) (time.Duration, time.Duration) {
	q := h.ValueAtPercentiles([]float64{50, 99})
	m := func(us int64) time.Duration { return toModel(time.Duration(us)*time.Microsecond, st.scale) }
	return m(q[50]), m(q[99])
}

// model converts percentiles measured in real time to model time.
func (st *stack) model(p load.Percentiles) load.Percentiles {
	m := func(d time.Duration) time.Duration { return toModel(d, st.scale) }
	return load.Percentiles{N: p.N, Mean: m(p.Mean), P50: m(p.P50), P90: m(p.P90), P99: m(p.P99), Max: m(p.Max)}
}

// close stops Sluice (cutting what is left) and the provider.
func (st *stack) close() { st.Stack.Close() }

// toModel converts a real duration to model time.
func toModel(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) / scale)
}
