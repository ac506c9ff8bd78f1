package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/scenario"
)

func init() {
	register("scenarios", "run the scenario suite (four limiters side by side) and write reports", runScenarios)
}

// runScenarios runs the named scenarios (all by default) one after the
// other, writes each report into -out as soon as it is done, rebuilds the
// index, and prints every comparison table on stdout. Progress goes to
// stderr.
func runScenarios(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scenarios", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var names, scaleNames []string
	for _, sc := range scenario.All() {
		names = append(names, sc.Name)
	}
	for _, sc := range scenario.Scale() {
		scaleNames = append(scaleNames, sc.Name)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sluice-bench scenarios [flags]\n\nRuns each scenario with fixed @ ceiling, fixed @ capacity (oracle), aimd and gradient2\nside by side through the Sluice handler over loopback, and writes NAME.md, NAME-*.svg,\nNAME.json and README.md into -out.\n\nThe clients name each request's output size as max_tokens; -shapes none sends no\nmax_tokens (as most chat code), -shapes both runs each scenario once each way, one after\nthe other (twice the time), and reports them side by side. The provider produces the\nsame answers either way.\n\n-capacity C runs a scenario at another capacity: the suite's scenarios are scaled by C\nover the concurrency their oracle runs (providers, oracle, ceiling, clients or arrival\nrate, rate limit, Sluice's queue); the scale scenarios, run by name only, are built at C.\nAt hundreds of streams, -apart runs the variants one after the other.\n\nscenarios: %s\nat scale (by name): %s\n\nflags:\n", strings.Join(names, ", "), strings.Join(scaleNames, ", "))
		fs.PrintDefaults()
	}
	out := fs.String("out", "docs/bench", "directory for the reports")
	run := fs.String("run", "", "comma-separated scenario names (default: all)")
	scale := fs.Float64("timescale", scenario.DefaultTimeScale, "real time per model time (0.25: a 240 s scenario takes 60 s)")
	seed := fs.Uint64("seed", 1, "random seed for providers and load")
	short := fs.Bool("short", false, "reduced runs (12 s of model time, few clients): checks the machinery, numbers are meaningless")
	quiet := fs.Bool("q", false, "no progress on stderr")
	capacity := fs.Int("capacity", 0, "run at this capacity (0: each scenario's own)")
	apart := fs.Bool("apart", false, "run the variants one after the other instead of at the same time")
	shapesFlag := fs.String("shapes", "max_tokens", "request bodies: max_tokens (the drawn output size), none (no max_tokens), or both, side by side (twice the time)")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	if *scale <= 0 || *scale > 1 {
		fmt.Fprintln(stderr, "scenarios: -timescale must be in (0, 1]")
		return 2
	}
	shapes, err := scenario.ParseShapes(*shapesFlag)
	if err != nil {
		fmt.Fprintf(stderr, "scenarios: %v\n", err)
		return 2
	}
	var list []*scenario.Scenario
	if *run == "" {
		list = scenario.All()
	} else {
		for _, n := range strings.Split(*run, ",") {
			sc, ok := scenario.ByName(strings.TrimSpace(n))
			if !ok {
				fmt.Fprintf(stderr, "scenarios: unknown scenario %q (have %s)\n", n, strings.Join(append(names, scaleNames...), ", "))
				return 2
			}
			list = append(list, sc)
		}
	}
	if *capacity != 0 {
		var scaled []*scenario.Scenario
		for _, sc := range list {
			sc, err := scenario.AtCapacity(sc, *capacity)
			if err != nil && *run == "" {
				fmt.Fprintf(stderr, "scenarios: skipped: %v\n", err)
				continue
			}
			if err != nil {
				fmt.Fprintf(stderr, "scenarios: -capacity: %v\n", err)
				return 2
			}
			scaled = append(scaled, sc)
		}
		list = scaled
	}
	logf := func(format string, a ...any) {
		if !*quiet {
			fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
		}
	}
	for _, sc := range list {
		// One shape after the other: run side by side, they would share
		// the machine's cores and measure each other.
		var rs []*scenario.Result
		for _, shape := range shapes {
			r, err := scenario.Run(ctx, sc, scenario.Options{TimeScale: *scale, Seed: *seed, Short: *short, Shape: shape, Apart: *apart, Logf: logf})
			if err != nil {
				fmt.Fprintf(stderr, "scenarios: %v\n", err)
				return 1
			}
			rs = append(rs, r)
		}
		path, err := scenario.WriteScenario(*out, rs[0], rs[1:]...)
		if err != nil {
			fmt.Fprintf(stderr, "scenarios: %v\n", err)
			return 1
		}
		logf("%s: wrote %s", sc.Name, path)
		fmt.Fprintf(stdout, "## %s\n\n%s", sc.Title, scenario.Table(rs[0], rs[1:]...))
		for _, r := range rs {
			if len(r.Checks) > 0 {
				label := ""
				if len(rs) > 1 {
					label = "(" + r.Shape.Label() + ")\n"
				}
				fmt.Fprintf(stdout, "\n%s%s", label, scenario.ChecksMarkdown(r.Checks))
			}
		}
		fmt.Fprintln(stdout)
	}
	if err := scenario.WriteIndex(*out); err != nil {
		fmt.Fprintf(stderr, "scenarios: %v\n", err)
		return 1
	}
	return 0
}
