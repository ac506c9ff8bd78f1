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
	register("load", "drive a URL with streaming load (closed or open loop) and print latency percentiles", runLoad)
}

// runLoad runs bench/load against -url and prints a summary (text, or JSON
// with -json); -series writes the per-second time series as CSV.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice-bench load -url URL [flags]\n\nCloses the loop with -clients (each waits for its answer, thinks, sends again) or opens it\nwith -rate (Poisson arrivals). Sluice's own 429s (X-Sluice-Rejected) are told apart from\nthe provider's.\n\nflags:")
		fs.PrintDefaults()
	}
	var cfg load.Config
	fs.StringVar(&cfg.URL, "url", "", "request URL, e.g. http://127.0.0.1:8080/openai/v1/chat/completions (a path ending in /messages is sent as Anthropic)")
	fs.IntVar(&cfg.Clients, "clients", 0, "closed loop: number of clients")
	fs.DurationVar(&cfg.Think, "think", time.Second, "closed loop: mean think time (exponential)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: arrivals per second (Poisson)")
	fs.IntVar(&cfg.MaxOpen, "max-open", 10000, "open loop: most requests in progress")
	fs.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long to send requests")
	fs.BoolVar(&cfg.Stream, "stream", true, "ask for server-sent events")
	fs.StringVar(&cfg.Model, "model", "", `model name (default "sim-model")`)
	fs.Float64Var(&cfg.Prompt.Mean, "prompt", 1000, "mean prompt size in tokens (lognormal)")
	fs.Float64Var(&cfg.Prompt.Sigma, "prompt-sigma", 0.5, "sigma of the prompt size")
	fs.IntVar(&cfg.Prompt.Max, "prompt-max", 32000, "largest prompt")
	fs.Float64Var(&cfg.Output.Mean, "output", 250, "mean output size in tokens: the answer's length with -sim-headers (x-sim-output-tokens), max_tokens with -max-tokens drawn")
	fs.Float64Var(&cfg.Output.Sigma, "output-sigma", 0.5, "sigma of the output size")
	fs.IntVar(&cfg.Output.Max, "output-max", 2000, "largest output")
	maxTokens := fs.String("max-tokens", "none", "the body's max_tokens: none (as most chat code and the OpenAI SDKs), drawn (the drawn output size), or N (a fixed ceiling, as Anthropic code must send)")
	sdk := fs.String("sdk", "none", "behave as an official SDK's call: none (each request sent once), openai (openai-python) or anthropic (anthropic-sdk-python): their retries, backoff, Retry-After and x-should-retry handling and x-stainless-* headers")
	maxRetries := fs.Int("max-retries", load.DefaultMaxRetries, "with -sdk: retries per call at most (the SDKs' max_retries)")
	fs.DurationVar(&cfg.Timeout, "timeout", load.DefaultTimeout, "longest wait for any read of a response (the SDKs' read timeout; sent in x-stainless-read-timeout with -sdk); 0: none")
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
