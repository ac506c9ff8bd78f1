// Package load is a streaming load generator for LLM provider APIs, used by
// Sluice's scenario benchmarks, overhead runs and demo.
//
// It drives one URL (an OpenAI chat completions path, or an Anthropic
// /messages path) either closed loop (N clients, each sending a request,
// waiting for the whole answer, thinking, and sending the next) or open
// loop (Poisson arrivals at a fixed or time-varying rate, each on its own
// goroutine). Prompt and output sizes are drawn per request from seeded
// generators: closed-loop client i and open-loop arrival i see the same
// sizes, think times and arrival instants in every run with the same seed,
// whatever the server does, so runs against different limiters are
// comparable request for request.
//
// For each request it records status, who rejected it (Sluice, recognised by
// its X-Sluice-Rejected header, or the provider), time to response headers,
// time to first token, inter-token gaps, tokens and total time (see
// [Record]). [Result.Summary] gives p50/p90/p99 from HdrHistograms;
// [Result.Series] gives per-interval time series.
//
// At the end of the run every request still in progress is cut (its
// connection closed) and recorded as [Cut]; cut requests are left out of
// the statistics.
package load

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Config describes one run. Durations are real time.
type Config struct {
	// URL is the request URL, http only, e.g.
	// http://127.0.0.1:8080/openai/v1/chat/completions. A path ending in
	// /messages is sent and metered as Anthropic Messages, anything else as
	// OpenAI Chat Completions.
	URL string
	// Model is the request's model; "" means "sim-model".
	Model string
	// Stream asks for server-sent events ("stream": true).
	Stream bool
	// Headers are added to every request.
	Headers map[string]string
	// SimHeaders sends x-sim-prompt-tokens and x-sim-output-tokens, so the
	// simulated provider (bench/sim) uses exactly the drawn sizes.
	SimHeaders bool

	// Clients > 0 selects closed loop: that many clients, each starting
	// after one think time and then sending requests back to back with a
	// think time between them.
	Clients int
	// Think is the mean of the exponential think time (0: none).
	Think time.Duration
	// Ramp spreads the closed-loop clients' starts evenly over this long
	// (client i waits i*Ramp/Clients before its first think time).
	Ramp time.Duration

	// Rate > 0 (or RateAt) selects open loop: Poisson arrivals at Rate per
	// second.
	Rate float64
	// RateAt, when set, gives the arrival rate (per second) at each instant
	// since the start; it must not exceed MaxRate. Arrivals are drawn at
	// MaxRate and thinned.
	RateAt  func(elapsed time.Duration) float64
	MaxRate float64
	// MaxOpen bounds open-loop requests in progress (0: 10,000). An arrival
	// beyond it is not sent and is counted in Result.Overflow.
	MaxOpen int

	// Duration is how long requests are started; then every request still
	// running is cut.
	Duration time.Duration
	// Prompt and Output are the size distributions, in tokens. Output is
	// the length of the answer the simulated provider is asked for (in
	// x-sim-output-tokens with SimHeaders); whether the body names it is
	// MaxTokens' choice. A zero Output draws 0: no x-sim-output-tokens and
	// no drawn max_tokens (the server decides).
	Prompt, Output Dist
	// MaxTokens is what the body's max_tokens holds; the zero value,
	// MaxTokensDrawn, sends the drawn output size (see [MaxTokens]).
	MaxTokens MaxTokens
	// Seed seeds every per-client and per-arrival generator.
	Seed uint64

	// OnFirstToken, when set, is called with a stream's time to first
	// token as soon as it arrives; OnEnd with each request's record when
	// it ends (not for Cut requests). Both run on request goroutines and
	// must be cheap and safe for concurrent use.
	OnFirstToken func(ttft time.Duration)
	OnEnd        func(r *Record)
}

// Result is everything a run recorded.
type Result struct {
	// Started is when the run started (monotonic); Record.Start is relative
	// to it.
	Started time.Time
	// Elapsed is the run's length (Config.Duration plus the time to cut).
	Elapsed time.Duration
	// Records holds one entry per request sent, in no particular order.
	Records []Record
	// Gaps holds the gaps between consecutive output tokens of streams that
	// ended OK, in microseconds.
	Gaps *hdrhistogram.Histogram
	// Overflow counts open-loop arrivals not sent because MaxOpen requests
	// were in progress.
	Overflow int
}

// histogram bounds: 1 us .. 1 h, 3 significant figures.
func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
}

// Run runs cfg until cfg.Duration has passed or ctx is done, then cuts the
// requests in progress and returns what it recorded.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Duration <= 0 {
		return nil, errors.New("load: Duration must be > 0")
	}
	closed := cfg.Clients > 0
	open := cfg.Rate > 0 || cfg.RateAt != nil
	switch {
	case closed && open:
		return nil, errors.New("load: set Clients (closed loop) or Rate/RateAt (open loop), not both")
	case !closed && !open:
		return nil, errors.New("load: set Clients (closed loop) or Rate/RateAt (open loop)")
	case cfg.RateAt != nil && cfg.MaxRate <= 0:
		return nil, errors.New("load: RateAt needs MaxRate > 0")
	}
	if cfg.MaxOpen <= 0 {
		cfg.MaxOpen = 10000
	}
	conns := cfg.Clients
	if open {
		conns = cfg.MaxOpen
	}
	c, err := newClient(&cfg, conns+16)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, c: c, gaps: newHist()}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	r.start = time.Now()
	var wg sync.WaitGroup
	if closed {
		for i := range cfg.Clients {
			wg.Go(func() { r.closedClient(ctx, i) })
		}
	} else {
		wg.Go(func() { r.arrivals(ctx, &wg) })
	}
	<-ctx.Done()
	r.stopping.Store(true)
	c.stop()
	wg.Wait()
	return &Result{
		Started:  r.start,
		Elapsed:  time.Since(r.start),
		Records:  r.records,
		Gaps:     r.gaps,
		Overflow: r.overflow,
	}, nil
}

type runner struct {
	cfg      Config
	c        *client
	start    time.Time
	stopping atomic.Bool

	mu       sync.Mutex
	records  []Record
	gaps     *hdrhistogram.Histogram
	overflow int
	open     int
}

// one sends one request with sizes drawn from rng and records it.
func (r *runner) one(x *exchange, rng *rand.Rand, client int, local *[]Record) {
	prompt := r.cfg.Prompt.Draw(rng)
	output := r.cfg.Output.Draw(rng)
	rec := Record{Start: time.Since(r.start), Client: client, PromptTokens: prompt, OutputTokens: output}
	r.c.do(x, &rec, prompt, output, r.cfg.OnFirstToken)
	if rec.Outcome != OK && r.stopping.Load() {
		rec.Outcome = Cut
	}
	if rec.Outcome != Cut && r.cfg.OnEnd != nil {
		r.cfg.OnEnd(&rec)
	}
	if rec.Outcome == OK && len(x.gaps) > 0 {
		r.mu.Lock()
		for _, g := range x.gaps {
			_ = r.gaps.RecordValue(max(1, g.Microseconds()))
		}
		r.mu.Unlock()
	}
	if local != nil {
		*local = append(*local, rec)
		return
	}
	r.mu.Lock()
	r.records = append(r.records, rec)
	r.mu.Unlock()
}

// closedClient is one closed-loop client.
func (r *runner) closedClient(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)))
	think := r.cfg.Think.Seconds()
	var x exchange
	var local []Record
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer func() {
		r.mu.Lock()
		r.records = append(r.records, local...)
		r.mu.Unlock()
	}()
	if r.cfg.Ramp > 0 {
		timer.Reset(r.cfg.Ramp * time.Duration(i) / time.Duration(r.cfg.Clients))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
	}
	for {
		if d := expDuration(rng, think); d > 0 {
			timer.Reset(time.Duration(d * float64(time.Second)))
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		r.one(&x, rng, i, &local)
	}
}

// arrivals starts open-loop requests until ctx is done.
func (r *runner) arrivals(ctx context.Context, wg *sync.WaitGroup) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 1<<62))
	rate := r.cfg.Rate
	if r.cfg.RateAt != nil {
		rate = r.cfg.MaxRate
	}
	pool := sync.Pool{New: func() any { return new(exchange) }}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := time.Duration(0)
	for n := 0; ; n++ {
		next += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		accept := rng.Float64()
		timer.Reset(time.Until(r.start.Add(next)))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if r.cfg.RateAt != nil && accept*r.cfg.MaxRate >= r.cfg.RateAt(next) {
			continue
		}
		r.mu.Lock()
		if r.open >= r.cfg.MaxOpen {
			r.overflow++
			r.mu.Unlock()
			continue
		}
		r.open++
		r.mu.Unlock()
		wg.Go(func() {
			defer func() {
				r.mu.Lock()
				r.open--
				r.mu.Unlock()
			}()
			x := pool.Get().(*exchange)
			defer pool.Put(x)
			arng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(n)))
			r.one(x, arng, n, nil)
		})
	}
}
