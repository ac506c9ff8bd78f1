package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
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
	printSummary(stdout, sum, res.Overflow)
	return 0
}

func printSummary(w io.Writer, s load.Summary, overflow int) {
	fmt.Fprintf(w, "requests %d in %v: ok %d, rejected by Sluice %d, rejected by provider %d, failed %d (cut at the end: %d",
		s.Requests, s.Elapsed.Round(time.Millisecond), s.OK, s.RejectedSluice, s.RejectedUpstream, s.Failed, s.Cut)
	if overflow > 0 {
		fmt.Fprintf(w, ", not sent: %d", overflow)
	}
	fmt.Fprintf(w, ")\nthroughput %.1f ok/s, %.0f output tokens/s\n", s.OKPerSecond, s.TokensPerSecond)
	fmt.Fprintf(w, "%-6s %10s %10s %10s %10s %10s\n", "", "p50", "p90", "p99", "max", "mean")
	for _, row := range []struct {
		name string
		p    load.Percentiles
	}{{"TTFB", s.TTFB}, {"TTFT", s.TTFT}, {"ITL", s.ITL}, {"total", s.Total}} {
		if row.p.N == 0 {
			continue
		}
		fmt.Fprintf(w, "%-6s %10v %10v %10v %10v %10v\n", row.name, rd(row.p.P50), rd(row.p.P90), rd(row.p.P99), rd(row.p.Max), rd(row.p.Mean))
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
