package fair

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/bench/load"
)

// EarlyRejection: a flood whose requests may wait 2 s; probes retry at the
// time each sampled refusal said.
func EarlyRejection() *Scenario {
	return &Scenario{
		Name:  "early-rejection",
		Title: "Early rejection: deadline 2 s, flood at 3x capacity, retries at Retry-After",
		About: "The provider and limit of two-tenants, with varied service times: TTFT jitter (lognormal, sigma 0.3) and " +
			"lognormal prompts and answers (400 and 50 tokens on average, sigma 0.5): about 15 requests/s. " +
			"One tenant sends 46 requests/s, each with `X-Sluice-Max-Wait: 2s`. Sluice refuses at once those whose estimated wait exceeds 2 s. " +
			"Twice a second (after a 15 s warm-up, until 3 s before the end) one refusal is followed up: at the time its `retry-after-ms` " +
			"said, a retry of the same tenant (allowed the default 10 s) is sent, and its wait in Sluice's queue " +
			"measured (the simulated provider sends headers on arrival, so its time to headers is that wait, plus " +
			"about a millisecond). Refusal latency is Sluice's (its spans: arrival to answer).",
		Run: runEarlyRejection,
	}
}

// probes sends the retries and keeps what they saw.
type probes struct {
	url  string
	hc   *fasthttp.HostClient
	body []byte
	skip time.Time
	stop time.Time // no sample after: the flood must still run when the retry comes
	wg   sync.WaitGroup

	mu     sync.Mutex
	next   time.Time // no sample before
	ratios []float64
	failed int
}

func newProbes(target string, skip, stop time.Time) (*probes, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	body := `{"model":"sim-model","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"` +
		strings.Repeat("lorem ipsum ", 133) + `"}]}`
	return &probes{url: target, hc: &fasthttp.HostClient{Addr: u.Host, MaxConns: 64}, body: []byte(body), skip: skip, stop: stop, next: skip}, nil
}

// refused is the flood's OnEnd: it samples a refusal every 500 ms and
// sends its retry at the time the refusal said.
func (p *probes) refused(r *load.Record) {
	if r.Outcome != load.RejectedSluice || r.RetryAfter <= 0 {
		return
	}
	now := time.Now()
	p.mu.Lock()
	if now.Before(p.next) || now.Add(r.RetryAfter).After(p.stop) {
		p.mu.Unlock()
		return
	}
	p.next = now.Add(500 * time.Millisecond)
	p.mu.Unlock()
	told := r.RetryAfter
	p.wg.Go(func() {
		time.Sleep(told)
		wait, ok := p.retry()
		p.mu.Lock()
		defer p.mu.Unlock()
		if !ok {
			p.failed++
			return
		}
		p.ratios = append(p.ratios, float64(wait)/float64(told))
	})
}

// retry sends one request of the flood's tenant without a short deadline
// and returns the time to its response headers.
func (p *probes) retry() (time.Duration, bool) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(p.url)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer sk-flood")
	req.Header.Set("x-sim-prompt-tokens", "400")
	req.Header.Set("x-sim-output-tokens", "50")
	req.SetBodyRaw(p.body)
	resp.StreamBody = true
	start := time.Now()
	err := p.hc.DoTimeout(req, resp, time.Minute)
	ttfb := time.Since(start)
	if err != nil {
		return 0, false
	}
	ok := resp.StatusCode() == fasthttp.StatusOK
	_ = resp.Body() // read the stream to its end
	return ttfb, ok
}

func runEarlyRejection(ctx context.Context, opt Options) (*Report, error) {
	dur, skip := opt.seconds(75*time.Second, 8*time.Second), opt.seconds(15*time.Second, 2*time.Second)
	simCfg := exactSim
	simCfg.Seed, simCfg.JitterSigma = opt.Seed, 0 // default jitter
	st, err := newStack(simCfg, exactConfig)
	if err != nil {
		return nil, err
	}
	defer st.close()
	t0 := time.Now()
	pr, err := newProbes(st.url, t0.Add(skip), t0.Add(dur-3*time.Second))
	if err != nil {
		return nil, err
	}
	opt.logf("early-rejection: %v", dur)
	f := tenantFlow(st, "flood", "sk-flood", 46, 400, dur, opt.Seed)
	f.cfg.Prompt, f.cfg.Output = load.Dist{Mean: 400, Sigma: 0.5, Max: 2000}, load.Dist{Mean: 50, Sigma: 0.5, Max: 200}
	f.cfg.Headers["X-Sluice-Max-Wait"] = "2s"
	f.cfg.OnEnd = pr.refused
	res, err := runFlows(ctx, []flow{f})
	pr.wg.Wait()
	pr.hc.CloseIdleConnections()
	if err != nil {
		return nil, err
	}
	var lat, ttfb []time.Duration
	for _, s := range st.spans.since(t0.Add(skip)) {
		if s.Rejected == "queue_deadline" {
			lat = append(lat, s.End.Sub(s.Start))
		}
	}
	var told []time.Duration
	timeouts := 0
	for _, rec := range after(res["flood"].Records, skip) {
		switch rec.Reason {
		case "queue_deadline":
			ttfb = append(ttfb, rec.TTFB)
			told = append(told, rec.RetryAfter)
		case "queue_timeout":
			timeouts++
		}
	}
	done := windowOf(res["flood"].Records, skip, dur).completed
	ratios := make([]time.Duration, len(pr.ratios)) // as durations, to reuse quantile
	for i, x := range pr.ratios {
		ratios[i] = time.Duration(x * 1000)
	}
	q := func(p float64) float64 { return float64(quantile(ratios, p)) / 1000 }
	r := &Report{Scenario: EarlyRejection(), Short: opt.Short}
	r.Tables = append(r.Tables, fmt.Sprintf(
		"| completed | refused at once (queue_deadline) | timed out after 2 s (queue_timeout) | refusal latency in Sluice p50 / p90 / p99 / max | client time to the refusal p50 / p99 | Retry-After told p50 / p90 |\n|---|---|---|---|---|---|\n"+
			"| %.2f/s | %d | %d | %s / %s / %s / %s | %s / %s | %s / %s |\n\n"+
			"| retries sent at Retry-After | retries refused | retry's wait / Retry-After p5 / p50 / p95 |\n|---|---|---|\n| %d | %d | %.2f / %.2f / %.2f |\n",
		done, len(lat), timeouts, fmtDur(quantile(lat, 0.5)), fmtDur(quantile(lat, 0.9)), fmtDur(quantile(lat, 0.99)), fmtDur(quantile(lat, 1)),
		fmtDur(quantile(ttfb, 0.5)), fmtDur(quantile(ttfb, 0.99)), fmtDur(quantile(told, 0.5)), fmtDur(quantile(told, 0.9)),
		len(pr.ratios), pr.failed, q(0.05), q(0.5), q(0.95)))
	r.Checks = append(r.Checks,
		Check{
			Target: "a request whose estimated wait exceeds its deadline is refused within 1 ms of arriving (p99)",
			Got:    fmt.Sprintf("p99 %s, max %s over %d refusals", fmtDur(quantile(lat, 0.99)), fmtDur(quantile(lat, 1)), len(lat)),
			Met:    len(lat) > 0 && quantile(lat, 0.99) <= time.Millisecond,
		},
		Check{
			Target: "Retry-After within a factor of 2 of the wait a retry at that time has (p5 and p95 of the ratio in 0.5 .. 2)",
			Got:    fmt.Sprintf("%.2f .. %.2f (median %.2f) over %d retries", q(0.05), q(0.95), q(0.5), len(pr.ratios)),
			Met:    len(pr.ratios) >= 5 && q(0.05) >= 0.5 && q(0.95) <= 2,
		})
	return r, nil
}
