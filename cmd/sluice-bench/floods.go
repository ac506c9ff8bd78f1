package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/floods"
)

func init() {
	register("floods", "connection and body floods against a running Sluice, with a well-behaved client measuring what it sees", runFloods)
}

// runFloods runs bench/floods once per flood named in -floods and prints a
// Markdown table row for each.
func runFloods(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("floods", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sluice-bench floods [flags]\n\nAgainst a running Sluice in front of an OpenAI-shaped provider (e.g. sluice-bench sim), opens a flood of\n"+
			"connections from -from (other loopback addresses than the client's) and runs a closed-loop client beside it.\n"+
			"Floods: bodies (POSTs declaring -body-decl bytes, sending only the first byte of it), conns (connections that\n"+
			"send nothing), idle (connections left idle after one request), none (the client alone).\n\nflags:\n")
		fs.PrintDefaults()
	}
	target := fs.String("target", "http://127.0.0.1:8080/openai", "Sluice's URL of the route")
	kinds := fs.String("floods", "none,bodies,conns,idle", "comma-separated floods to run, one after the other")
	conns := fs.Int("conns", 0, "flood connections (0: 33 for bodies, 5000 for conns and idle)")
	from := fs.String("from", "127.0.0.2", "comma-separated local addresses the flood dials from")
	decl := fs.Int("body-decl", 8<<20, "Content-Length the bodies flood declares")
	workers := fs.Int("workers", 4, "the client's closed-loop workers")
	dur := fs.Duration("duration", 10*time.Second, "the client's run, per flood")
	size := fs.Int("body", 64<<10, "the client's request body bytes")
	timeout := fs.Duration("timeout", 5*time.Second, "the client's deadline per request")
	label := fs.String("label", "", "first column of the printed rows (e.g. the build)")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	fmt.Fprintln(stdout, "| build | flood | flood conns open / opened | client requests | client 200 | p50 | p99 | other answers |")
	fmt.Fprintln(stdout, "|---|---|---|---|---|---|---|---|")
	for _, k := range strings.Split(*kinds, ",") {
		k = strings.TrimSpace(k)
		n := *conns
		if n == 0 {
			n = 5000
			if k == floods.Bodies {
				n = 33
			}
		}
		r, err := floods.Run(ctx, floods.Config{Target: *target, Flood: k, Conns: n, From: strings.Split(*from, ","), BodyDecl: *decl,
			Workers: *workers, Duration: *dur, BodySize: *size, Timeout: *timeout,
			Logf: func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }})
		if err != nil {
			fmt.Fprintf(stderr, "floods: %s: %v\n", k, err)
			return 1
		}
		fmt.Fprintln(stdout, r.Line(*label))
		// Let Sluice close what the flood left before the next one.
		time.Sleep(time.Second)
	}
	return 0
}
