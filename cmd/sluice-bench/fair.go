package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluicehq/sluice/bench/fair"
)

func init() {
	register("fair", "run the fair queue scenarios (batch flood, two tenants, early rejection)", runFair)
}

// runFair runs the named fair-queue scenarios (all by default) one after
// the other and prints each report in Markdown on stdout (and into -out
// when set). It exits 1 when a target was not met.
func runFair(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var names []string
	for _, sc := range fair.All() {
		names = append(names, sc.Name)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sluice-bench fair [flags]\n\nRuns the fair queue's scenarios in real time against a simulated provider behind\nthe Sluice handler over loopback and prints their reports (Markdown).\n\nscenarios: %s\n\nflags:\n", strings.Join(names, ", "))
		fs.PrintDefaults()
	}
	run := fs.String("run", "", "comma-separated scenario names (default: all)")
	out := fs.String("out", "", "also write the reports to this file")
	seed := fs.Uint64("seed", 1, "random seed for providers and load")
	short := fs.Bool("short", false, "a few seconds per scenario: checks the machinery, numbers are meaningless")
	quiet := fs.Bool("q", false, "no progress on stderr")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	list := fair.All()
	if *run != "" {
		list = nil
		for _, n := range strings.Split(*run, ",") {
			sc, ok := fair.ByName(strings.TrimSpace(n))
			if !ok {
				fmt.Fprintf(stderr, "fair: unknown scenario %q (have %s)\n", n, strings.Join(names, ", "))
				return 2
			}
			list = append(list, sc)
		}
	}
	opt := fair.Options{Short: *short, Seed: *seed}
	if !*quiet {
		opt.Logf = func(f string, a ...any) { fmt.Fprintf(stderr, f+"\n", a...) }
	}
	var all strings.Builder
	code := 0
	for _, sc := range list {
		rep, err := sc.Run(ctx, opt)
		if err != nil {
			fmt.Fprintf(stderr, "fair: %s: %v\n", sc.Name, err)
			return 1
		}
		md := rep.Markdown()
		fmt.Fprint(stdout, md)
		all.WriteString(md)
		if !rep.Met() && !*short {
			code = 1
		}
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(all.String()), 0o644); err != nil {
			fmt.Fprintf(stderr, "fair: %v\n", err)
			return 1
		}
	}
	return code
}
