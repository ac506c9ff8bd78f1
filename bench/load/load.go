// Package load is a streaming load generator for LLM provider APIs, used by
// Sluice's scenario benchmarks, overhead runs and demo, and by hand through
// sluice-bench load. It tries to send what real client code sends
// (issue 25; docs/bench-load.md).
//
// It drives one URL (an OpenAI chat completions path, or an Anthropic
// /messages path) either closed loop (N clients, each making a call,
// waiting for the whole answer, thinking, and calling again; pausing
// RefusalPause after a call that failed) or open loop (Poisson arrivals at
// a fixed or time-varying rate, each on its own goroutine). Prompt and
// output sizes are drawn per call from seeded generators: closed-loop
// client i and open-loop arrival i see the same sizes, think times and
// arrival instants in every run with the same seed, whatever the server
// does, so runs against different limiters are comparable call for call.
//
// A call is what the calling code makes; with an SDK ([Config.SDK]) it
// sends one or more requests (attempts) with the official Python SDKs'
// retries, backoff and x-stainless-* headers (see [SDK] for the rules and
// their source). The body names max_tokens or not ([MaxTokens]); calls
// can be spread over several API keys ([Config.Tenants]).
//
// For each request it records status, who rejected it (Sluice, recognised by
// its X-Sluice-Rejected header, or the provider), time to response headers,
// time to first token, inter-token gaps, tokens and total time (see
// [Record]); for each call its attempts, backoff and outcome ([Call]).
// [Result.Summary] gives p50/p90/p99 from HdrHistograms for both;
// [Result.Series] gives per-interval time series of requests.
//
// At the end of the run every request still in progress is cut (its
// connection closed) and recorded as [Cut], as is every call still in
// progress or in a backoff; cut requests and calls are left out of the
// statistics.
package load

import (
	"context"
	"errors"
	"fmt"
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
	// Tenants > 0 spreads the calls over that many API keys (TenantKey:
	// sk-tenant-0, sk-tenant-1, ...) sent as "Authorization: Bearer KEY",
	// or as "x-api-key: KEY" to an Anthropic path; they replace those of
	// Headers. A closed-loop client keeps one key for the whole run.
	Tenants int
	// TenantSkew gives tenant k a share of clients (closed loop) or
	// arrivals (open loop) proportional to 1/(k+1)^TenantSkew: 0 spreads
	// them evenly, 1 gives tenant 0 twice tenant 1's traffic and three
	// times tenant 2's.
	TenantSkew float64
	// RotateKeys sends every request with a new API key (sk-rotate-1,
	// sk-rotate-2, ...), as a client that rotates keys to escape
	// per-client limits would; it replaces the credential of Headers and
	// Tenants.
	RotateKeys bool
	// SimHeaders sends x-sim-prompt-tokens and x-sim-output-tokens, so the
	// simulated provider (bench/sim) uses exactly the drawn sizes.
	SimHeaders bool

	// Clients > 0 selects closed loop: that many clients, each starting
	// after one think time and then sending requests back to back with a
	// think time between them.
	Clients int
	// Think is the mean of the exponential think time (0: none).
	Think time.Duration
	// RefusalPause is how long a closed-loop client waits after a call
	// that did not end OK, before its think time: what code that sleeps
	// on errors does. 0 means no pause; with Think 0 too, a refused call
	// is sent again at once, the raw hot loop of code that retries in a
	// bare loop (a refusing proxy then answers as fast as it can, and the
	// generator keeps every answer). sluice-bench load pauses 1 s unless
	// told otherwise.
	RefusalPause time.Duration
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

	// SDK makes every call behave as the named official SDK's: its
	// retries, backoff and headers (see [SDK]). SDKNone, the zero value,
	// sends each call once, with no SDK headers.
	SDK SDK
	// MaxRetries is how many times an SDK sends a call again at most; 0
	// means DefaultMaxRetries (2, the SDKs' default), < 0 none.
	MaxRetries int
	// Timeout bounds each read of an attempt (the response headers, each
	// piece of a body), as the SDKs' read timeout does; an attempt that
	// times out is a connection error, which an SDK retries. 0 means
	// DefaultTimeout (10 min, the SDKs') with an SDK and none without;
	// < 0 none.
	Timeout time.Duration
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
	// Records holds one entry per request sent (per attempt), in no
	// particular order.
	Records []Record
	// Calls holds one entry per call (logical request), in no particular
	// order; without an SDK, calls and records are one to one.
	Calls []Call
	// Tenants is Config.Tenants.
	Tenants int
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
	if int(cfg.SDK) >= len(sdks) {
		return nil, fmt.Errorf("load: unknown SDK %d", cfg.SDK)
	}
	if cfg.Tenants < 0 || cfg.TenantSkew < 0 {
		return nil, errors.New("load: Tenants and TenantSkew must be >= 0")
	}
	if cfg.MaxOpen <= 0 {
		cfg.MaxOpen = 10000
	}
	maxRetries := cfg.MaxRetries
	switch {
	case maxRetries == 0:
		maxRetries = DefaultMaxRetries
	case maxRetries < 0:
		maxRetries = 0
	}
	timeout := cfg.Timeout
	switch {
	case timeout == 0 && cfg.SDK != SDKNone:
		timeout = DefaultTimeout
	case timeout < 0:
		timeout = 0
	}
	conns := cfg.Clients
	if open {
		conns = cfg.MaxOpen
	}
	c, err := newClient(&cfg, conns+16, timeout)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, c: c, gaps: newHist(), maxRetries: maxRetries, tenants: newTenants(cfg.Tenants, cfg.TenantSkew)}
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
		Calls:    r.calls,
		Tenants:  cfg.Tenants,
		Gaps:     r.gaps,
		Overflow: r.overflow,
	}, nil
}

type runner struct {
	cfg        Config
	c          *client
	maxRetries int
	tenants    tenants
	start      time.Time
	stopping   atomic.Bool

	mu       sync.Mutex
	records  []Record
	calls    []Call
	gaps     *hdrhistogram.Histogram
	overflow int
	open     int
}

// sink collects one closed-loop client's records and calls, merged into
// the run's at its end; nil appends to the run's under its lock.
type sink struct {
	records []Record
	calls   []Call
}

// Salt of the generators of the SDKs' jitter, so that their draws never
// share a stream with the sizes and think times: those stay the same
// request for request whatever the server answers and however often the
// calls are retried.
const jitterSalt = 0x6a09e667f3bcc908

// call makes one call: it draws the sizes from rng, then sends attempts as
// the SDK would until one succeeds or the SDK stops (backoff jitter from
// jitter, created on first use), recording every attempt and the call.
func (r *runner) call(ctx context.Context, x *exchange, rng *rand.Rand, jitter **rand.Rand, client, tenant int, out *sink) Call {
	prompt := r.cfg.Prompt.Draw(rng)
	output := r.cfg.Output.Draw(rng)
	cl := Call{Start: time.Since(r.start), Client: client, Tenant: tenant}
	for n := 0; ; n++ {
		rec := Record{Start: time.Since(r.start), Client: client, Tenant: tenant, Retry: n, PromptTokens: prompt, OutputTokens: output}
		r.c.do(x, &rec, r.cfg.OnFirstToken)
		if rec.Outcome != OK && r.stopping.Load() {
			rec.Outcome = Cut
		}
		r.record(x, &rec, out)
		cl.Attempts++
		cl.Outcome, cl.Status, cl.Reason = rec.Outcome, rec.Status, rec.Reason
		if rec.Outcome == Cut {
			cl.Stop = StopCut
			break
		}
		if rec.Outcome == OK {
			cl.Stop, cl.Tokens = StopOK, rec.Tokens
			if rec.TTFT > 0 {
				cl.TTFT = rec.Start + rec.TTFT - cl.Start
			}
			break
		}
		if *jitter == nil && r.cfg.SDK != SDKNone {
			*jitter = rand.New(rand.NewPCG(r.cfg.Seed^jitterSalt, uint64(client)))
		}
		random := func() float64 { return (*jitter).Float64() }
		wait, stop := r.cfg.SDK.decide(n, r.maxRetries, &x.ans, random, time.Now())
		if stop != stopNeedsDecision {
			cl.Stop = stop
			break
		}
		slept, ok := sleep(ctx, wait)
		cl.Backoff += slept
		if !ok || ctx.Err() != nil {
			cl.Outcome, cl.Stop = Cut, StopCut
			break
		}
	}
	cl.Total = time.Since(r.start) - cl.Start
	if out != nil {
		out.calls = append(out.calls, cl)
	} else {
		r.mu.Lock()
		r.calls = append(r.calls, cl)
		r.mu.Unlock()
	}
	return cl
}

// record hands one attempt's record to OnEnd, its token gaps to the run's
// histogram, and keeps it.
func (r *runner) record(x *exchange, rec *Record, out *sink) {
	if rec.Outcome != Cut && r.cfg.OnEnd != nil {
		r.cfg.OnEnd(rec)
	}
	if rec.Outcome == OK && len(x.gaps) > 0 {
		r.mu.Lock()
		for _, g := range x.gaps {
			_ = r.gaps.RecordValue(max(1, g.Microseconds()))
		}
		r.mu.Unlock()
	}
	if out != nil {
		out.records = append(out.records, *rec)
		return
	}
	r.mu.Lock()
	r.records = append(r.records, *rec)
	r.mu.Unlock()
}

// sleep waits d or until ctx is done, and says how long it waited and
// whether it waited all of d.
func sleep(ctx context.Context, d time.Duration) (time.Duration, bool) {
	if d <= 0 {
		return 0, ctx.Err() == nil
	}
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return time.Since(start), false
	case <-t.C:
		return time.Since(start), true
	}
}

// closedClient is one closed-loop client.
func (r *runner) closedClient(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)))
	var jitter *rand.Rand
	think := r.cfg.Think.Seconds()
	var x exchange
	var local sink
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer func() {
		r.mu.Lock()
		r.records = append(r.records, local.records...)
		r.calls = append(r.calls, local.calls...)
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
	tenant := r.tenants.client(i, r.cfg.Clients)
	pause := time.Duration(0)
	for {
		// The draw comes first, whatever the pause: think times stay the
		// same call for call whatever the server answers.
		d := time.Duration(expDuration(rng, think) * float64(time.Second))
		if d += pause; d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		pause = 0
		if cl := r.call(ctx, &x, rng, &jitter, i, tenant, &local); cl.Outcome != OK {
			pause = r.cfg.RefusalPause
		}
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
			var jitter *rand.Rand
			r.call(ctx, x, arng, &jitter, n, r.tenants.arrival(n), nil)
		})
	}
}
