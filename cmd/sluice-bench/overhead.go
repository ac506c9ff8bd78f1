package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/overhead"
)

func init() {
	register("overhead", "measure Sluice's added latency, CPU and memory against direct (and nginx)", runOverhead)
}

// runOverhead runs bench/overhead and writes overhead.md and overhead.json
// into -out; the Markdown is also printed on stdout.
func runOverhead(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice-bench overhead [flags]\n\nStarts `sluice-bench sim` (instant upstream), `sluice serve` and optionally nginx as separate\nprocesses on 127.0.0.1 and sends the same load directly and through each proxy. Linux only.\n\nflags:")
		fs.PrintDefaults()
	}
	self, _ := os.Executable()
	sluiceBin := fs.String("sluice", filepath.Join(filepath.Dir(self), "sluice"), "sluice binary (make build puts it next to sluice-bench)")
	benchBin := fs.String("bench", self, "sluice-bench binary, run as the upstream")
	nginx := fs.String("nginx", "", `nginx binary to compare against ("auto": nginx from PATH if installed)`)
	conc := fs.String("concurrency", "1,16,64,256", "comma-separated client counts")
	dur := fs.Duration("duration", 5*time.Second, "length of each measurement")
	tokens := fs.Int("tokens", 16, "output tokens per answer")
	streams := fs.Int("streams", 10000, "open streams for the memory run (negative: skip it)")
	out := fs.String("out", "docs/bench", "directory for overhead.md and overhead.json")
	quiet := fs.Bool("q", false, "no progress on stderr")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "overhead: unexpected arguments %q\n", fs.Args())
		return 2
	}
	opt := overhead.Options{Sluice: *sluiceBin, Bench: *benchBin, Duration: *dur, Tokens: *tokens, Streams: *streams}
	if *streams == 0 {
		opt.Streams = -1
	}
	for _, c := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "overhead: -concurrency: bad value %q\n", c)
			return 2
		}
		opt.Concurrency = append(opt.Concurrency, n)
	}
	switch *nginx {
	case "":
	case "auto":
		if p, err := exec.LookPath("nginx"); err == nil {
			opt.Nginx = p
		} else if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
			opt.Nginx = "/usr/sbin/nginx"
		}
	default:
		opt.Nginx = *nginx
	}
	if _, err := os.Stat(opt.Sluice); err != nil {
		fmt.Fprintf(stderr, "overhead: sluice binary: %v (run make build, or pass -sluice)\n", err)
		return 2
	}
	if !*quiet {
		opt.Logf = func(format string, a ...any) {
			fmt.Fprintf(stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
		}
	}
	rep, err := overhead.Run(ctx, opt)
	if err != nil {
		fmt.Fprintf(stderr, "overhead: %v\n", err)
		return 1
	}
	path, err := overhead.WriteReport(*out, rep)
	if err != nil {
		fmt.Fprintf(stderr, "overhead: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, rep.Markdown())
	if opt.Logf != nil {
		opt.Logf("wrote %s", path)
	}
	return 0
}
