package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	benchdemo "github.com/sluicehq/sluice/bench/demo"
)

func init() {
	register("demo", "a simulated provider behind Sluice under load, against a fixed limit (about a minute)", runDemo)
}

// runDemo runs `sluice-bench demo` (what `make demo` runs): a simulated
// provider with a capacity step behind Sluice (gradient2) under load, side
// by side with a fixed limit, for about a minute; see bench/demo. It needs
// nothing but this binary: the provider, Sluice and the clients all run in
// this process on loopback.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: sluice-bench demo [flags]\n\n"+
			"Runs a simulated LLM provider whose capacity steps 40 -> 20 -> 40 behind Sluice (gradient2),\n"+
			"with an identical provider behind a fixed limit alongside, under streaming load. Prints a\n"+
			"line per second, a comparison at the end, and the path of an HTML report with charts.\n\nflags:\n")
		fs.PrintDefaults()
	}
	var opt benchdemo.Options
	fs.DurationVar(&opt.Duration, "duration", time.Minute, "wall time of the demo (5s..4m); the provider's clock is scaled to fit 2m into it")
	fs.IntVar(&opt.Clients, "clients", 200, "streaming clients (closed loop, 1 s think time)")
	fs.IntVar(&opt.Ceiling, "ceiling", 50, "the fixed limit compared against, and gradient2's ceiling")
	fs.Uint64Var(&opt.Seed, "seed", 1, "random seed")
	fs.StringVar(&opt.Report, "report", "", "path of the HTML report (default: report.html in a new temporary directory)")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if _, err := benchdemo.Run(ctx, opt, stdout); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	return 0
}
