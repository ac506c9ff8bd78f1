package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/load"
)

func init() {
	register("load", "drive a URL with calls as client code makes them (closed or open loop, SDK retries, tenants) and print what they saw", runLoad)
}

const loadUsage = `usage: sluice-bench load -url URL [flags]

Sends calls to one URL, as client code would, and prints what it saw.

Loops. -clients N closes the loop: each client sends a call, waits for the
whole answer, thinks (-think, exponential), and calls again; after a call
that did not end OK it first pauses -refusal-pause (1s; -refusal-pause 0
-think 0 is the raw hot loop of code that retries in a bare loop). -rate R
opens it: Poisson arrivals, each call on its own.

Request shape. -max-tokens none (the default) sends no max_tokens, as most
chat code and the OpenAI SDKs; drawn sends each call's drawn output size;
N a fixed ceiling, as Anthropic code must. With -sim-headers the drawn size
reaches bench/sim in x-sim-output-tokens whatever the body says.

SDKs. -sdk openai or anthropic makes every call as openai-python or
anthropic-sdk-python would: up to -max-retries retries of connection
errors, timeouts, 408, 409, 429 and 5xx (x-should-retry: true/false
overrides; openai gives up on a Retry-After above 120 s), after the
server's retry-after-ms or Retry-After when 0 < it <= 120 s (openai) or
60 s (anthropic), else min(0.5s * 2^n, 8s) less up to 25% jitter; each
attempt carries x-stainless-retry-count (0 on the first) and the timeout
headers. The summary gives both views: requests sent (attempts) and calls.

Tenants. -tenants N spreads calls over N API keys, -tenant-skew s makes
tenant k's share proportional to 1/(k+1)^s; the summary adds a row each.

Sluice's own refusals (X-Sluice-Rejected) are told apart from the
provider's. docs/bench-load.md has the details.

flags:
`

// headerFlag collects -header 'Name: value' flags.
type headerFlag struct{ m map[string]string }

func (h *headerFlag) String() string { return "" }

func (h *headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return fmt.Errorf("header %q: want 'Name: value'", v)
	}
	if h.m == nil {
		h.m = map[string]string{}
	}
	h.m[name] = strings.TrimSpace(value)
	return nil
}

// runLoad runs bench/load against -url and prints a summary (text, or JSON
// with -json); -series writes the per-second time series as CSV.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, loadUsage)
		fs.PrintDefaults()
	}
	var cfg load.Config
	fs.StringVar(&cfg.URL, "url", "", "request URL, e.g. http://127.0.0.1:8080/openai/v1/chat/completions (a path ending in /messages is sent as Anthropic)")
	fs.IntVar(&cfg.Clients, "clients", 0, "closed loop: number of clients")
	fs.DurationVar(&cfg.Think, "think", time.Second, "closed loop: mean think time (exponential); 0: none")
	fs.DurationVar(&cfg.RefusalPause, "refusal-pause", time.Second, "closed loop: pause after a call that did not end OK, before the think time; 0 with -think 0: the raw hot loop")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: arrivals per second (Poisson)")
	fs.IntVar(&cfg.MaxOpen, "max-open", 10000, "open loop: most calls in progress")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long to start calls")
	fs.BoolVar(&cfg.Stream, "stream", true, "ask for server-sent events")
	fs.StringVar(&cfg.Model, "model", "", `model name (default "sim-model")`)
	fs.Float64Var(&cfg.Prompt.Mean, "prompt", 1000, "mean prompt size in tokens (lognormal)")
	fs.Float64Var(&cfg.Prompt.Sigma, "prompt-sigma", 0.5, "sigma of the prompt size")
	fs.IntVar(&cfg.Prompt.Max, "prompt-max", 32000, "largest prompt")
	fs.Float64Var(&cfg.Output.Mean, "output", 250, "mean output size in tokens: the answer's length with -sim-headers (x-sim-output-tokens), max_tokens with -max-tokens drawn")
	fs.Float64Var(&cfg.Output.Sigma, "output-sigma", 0.5, "sigma of the output size")
	fs.IntVar(&cfg.Output.Max, "output-max", 2000, "largest output")
	maxTokens := fs.String("max-tokens", "none", "the body's max_tokens: none (as most chat code and the OpenAI SDKs), drawn (the drawn output size), or N (a fixed ceiling, as Anthropic code must send)")
	sdk := fs.String("sdk", "none", "make calls as an official SDK: none (each request sent once), openai (openai-python) or anthropic (anthropic-sdk-python): their retries, backoff, Retry-After and x-should-retry handling and x-stainless-* headers")
	maxRetries := fs.Int("max-retries", load.DefaultMaxRetries, "with -sdk: retries per call at most (the SDKs' max_retries)")
	fs.DurationVar(&cfg.Timeout, "timeout", load.DefaultTimeout, "longest wait for any read of a response (the SDKs' read timeout; sent in x-stainless-read-timeout with -sdk); 0: none")
	fs.IntVar(&cfg.Tenants, "tenants", 0, "spread calls over N API keys sk-tenant-0..N-1 (Authorization: Bearer, or x-api-key to /messages)")
	fs.Float64Var(&cfg.TenantSkew, "tenant-skew", 0, "with -tenants: tenant k's share of clients or arrivals is proportional to 1/(k+1)^skew")
	var headers headerFlag
	fs.Var(&headers, "header", "add a header to every request, 'Name: value' (repeatable)")
	fs.BoolVar(&cfg.RotateKeys, "rotate-keys", false, "send every request with a new API key (sk-rotate-1, sk-rotate-2, ...), as a client escaping per-client limits")
	fs.BoolVar(&cfg.SimHeaders, "sim-headers", false, "send x-sim-prompt-tokens and x-sim-output-tokens (for bench/sim)")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "random seed")
	series := fs.String("series", "", "write the per-second series as CSV to this file")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if cfg.URL == "" {
		fmt.Fprintln(stderr, "load: -url is required")
		return 2
	}
	var err error
	if cfg.MaxTokens, err = load.ParseMaxTokens(*maxTokens); err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 2
	}
	if cfg.SDK, err = load.ParseSDK(*sdk); err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 2
	}
	cfg.Headers = headers.m
	// The flags say 0 for none; Config says 0 for the default.
	cfg.MaxRetries = *maxRetries
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = -1
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = -1
	}
	res, err := load.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "load: %v\n", err)
		return 2
	}
	sum := res.Summary()
	if *series != "" {
		if err := writeSeries(*series, res.Series(time.Second)); err != nil {
			fmt.Fprintf(stderr, "load: %v\n", err)
			return 1
		}
	}
	if *asJSON {
		b, _ := json.MarshalIndent(sum, "", "  ") // Summary always marshals
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	printSummary(stdout, sum, res.Overflow, cfg.SDK != load.SDKNone)
	return 0
}

// printSummary prints both views of a run: the requests sent (attempts),
// and, with an SDK (or whenever a call was retried), the calls.
func printSummary(w io.Writer, s load.Summary, overflow int, sdk bool) {
	fmt.Fprintf(w, "requests %d in %v: ok %d, rejected by Sluice %d, rejected by provider %d, failed %d (cut at the end: %d",
		s.Requests, s.Elapsed.Round(time.Millisecond), s.OK, s.RejectedSluice, s.RejectedUpstream, s.Failed, s.Cut)
	if overflow > 0 {
		fmt.Fprintf(w, ", not sent: %d", overflow)
	}
	fmt.Fprintln(w, ")")
	if s.Retries > 0 || sdk {
		fmt.Fprintf(w, "  of which SDK retries: %d\n", s.Retries)
	}
	if len(s.Rejected) > 0 {
		fmt.Fprintf(w, "  rejected by Sluice: %s\n", counts(s.Rejected))
	}
	if p := s.RetryAfter; p.N > 0 {
		fmt.Fprintf(w, "  Retry-After asked by %d refusals: p50 %v, p90 %v, max %v\n", p.N, rd(p.P50), rd(p.P90), rd(p.Max))
	}
	c := &s.Calls
	showCalls := sdk || c.Retried > 0
	if showCalls {
		fmt.Fprintf(w, "calls %d: ok %d (%d after a retry), failed after retries %d", c.Calls, c.OK, c.OKAfterRetry, c.Failed)
		if c.Failed > 0 {
			fmt.Fprintf(w, " (last answer: %s; stopped: %s)", counts(c.FailedBy), counts(c.Stops))
		}
		fmt.Fprintf(w, " (cut at the end: %d)\n", c.Cut)
		att := make(map[string]int, len(c.Attempts))
		for n, k := range c.Attempts {
			att[fmt.Sprintf("%d attempt%s", n, plural(n))] = k
		}
		fmt.Fprintf(w, "  calls by attempts: %s; time in backoff %v\n", counts(att), c.Backoff.Round(time.Millisecond))
	}
	fmt.Fprintf(w, "throughput %.1f ok/s, %.0f output tokens/s\n", s.OKPerSecond, s.TokensPerSecond)
	fmt.Fprintf(w, "%-11s %10s %10s %10s %10s %10s\n", "", "p50", "p90", "p99", "max", "mean")
	type row struct {
		name string
		p    load.Percentiles
	}
	rows := []row{{"TTFB", s.TTFB}, {"TTFT", s.TTFT}, {"ITL", s.ITL}, {"total", s.Total}}
	if showCalls {
		rows = append(rows, row{"call TTFT", c.TTFT}, row{"call total", c.Total})
	}
	for _, row := range rows {
		if row.p.N == 0 {
			continue
		}
		fmt.Fprintf(w, "%-11s %10v %10v %10v %10v %10v\n", row.name, rd(row.p.P50), rd(row.p.P90), rd(row.p.P99), rd(row.p.Max), rd(row.p.Mean))
	}
	if showCalls {
		fmt.Fprintln(w, "(TTFB, TTFT, ITL, total: requests that ended OK; call TTFT and total: OK calls from their first attempt, retries and backoffs included)")
	}
	if len(s.Tenants) > 0 {
		fmt.Fprintf(w, "%-14s %8s %8s %8s %12s %10s %10s\n", "tenant", "calls", "ok", "failed", "tokens/s", "requests", "by Sluice")
		sec := s.Elapsed.Seconds()
		for _, t := range s.Tenants {
			fmt.Fprintf(w, "%-14s %8d %8d %8d %12.0f %10d %10d\n", t.Key, t.Calls, t.OK, t.Failed, float64(t.Tokens)/max(sec, 1e-9), t.Requests, t.RejectedSluice)
		}
	}
	if len(s.Reasons) > 0 {
		keys := make([]string, 0, len(s.Reasons))
		for k := range s.Reasons {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w, "failures:")
		for _, k := range keys {
			fmt.Fprintf(w, "  %6d  %s\n", s.Reasons[k], k)
		}
	}
}

// counts renders a count per name, largest first: "queue_full 390,
// queue_timeout 10".
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func rd(d time.Duration) time.Duration {
	switch {
	case d > time.Second:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func writeSeries(path string, b []load.Bucket) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	fmt.Fprintln(f, "second,started,ok,rejected_sluice,rejected_upstream,failed,tokens,in_flight,ttft_count,ttft_p50_ms,ttft_p99_ms")
	for _, x := range b {
		fmt.Fprintf(f, "%g,%d,%d,%d,%d,%d,%d,%d,%d,%.1f,%.1f\n", x.Start.Seconds(), x.Started, x.OK, x.RejectedSluice,
			x.RejectedUpstream, x.Failed, x.Tokens, x.InFlight, x.TTFTCount,
			float64(x.TTFTP50)/1e6, float64(x.TTFTP99)/1e6)
	}
	return f.Close()
}
