package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/overhead"
)

func init() {
	register("overhead", "measure Sluice's added latency, CPU and memory against direct, nginx and HAProxy", runOverhead)
}

// runOverhead runs bench/overhead and writes overhead.md and overhead.json
// into -out; the Markdown is also printed on stdout.
func runOverhead(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var names []string
	for _, c := range overhead.DefaultCases() {
		names = append(names, c.Name)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sluice-bench overhead [flags]\n\nStarts `sluice-bench sim`, `sluice serve` (fixed, and gradient2) and optionally nginx and HAProxy\n"+
			"as separate processes on 127.0.0.1 and sends the same load directly and through each proxy.\n"+
			"Cases: %s. Linux only.\n\nflags:\n", strings.Join(names, ", "))
		fs.PrintDefaults()
	}
	self, _ := os.Executable()
	sluiceBin := fs.String("sluice", filepath.Join(filepath.Dir(self), "sluice"), "sluice binary (make build puts it next to sluice-bench)")
	benchBin := fs.String("bench", self, "sluice-bench binary, run as the upstream")
	nginx := fs.String("nginx", "", `nginx binary to compare against ("auto": nginx if installed)`)
	haproxy := fs.String("haproxy", "", `haproxy binary to compare against ("auto": haproxy if installed)`)
	compare := fs.String("compare-sluice", "", "another sluice binary to run beside -sluice with the same config (\"Sluice B\"), to compare builds")
	oneProc := fs.Bool("gomaxprocs1", true, "also run Sluice (fixed) with GOMAXPROCS=1")
	g2 := fs.Bool("gradient2", true, "also run Sluice with the default algorithm (gradient2)")
	cases := fs.String("cases", strings.Join(names, ","), "comma-separated cases to run")
	rounds := fs.Int("rounds", 1, "rounds of every case against every target (the report gives medians)")
	dur := fs.Duration("duration", 5*time.Second, "length of each measurement")
	streams := fs.Int("streams", 10000, "open streams for the memory run (0: skip it)")
	out := fs.String("out", "docs/bench", "directory for overhead.md and overhead.json")
	quiet := fs.Bool("q", false, "no progress on stderr")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	opt := overhead.Options{Sluice: *sluiceBin, Bench: *benchBin, Duration: *dur, Streams: *streams,
		Rounds: *rounds, Gradient2: *g2, CompareSluice: *compare, OneProc: *oneProc}
	if *streams <= 0 {
		opt.Streams = -1
	}
	for _, name := range strings.Split(*cases, ",") {
		i := -1
		for j, c := range overhead.DefaultCases() {
			if c.Name == strings.TrimSpace(name) {
				i = j
			}
		}
		if i < 0 {
			fmt.Fprintf(stderr, "overhead: -cases: unknown case %q (known: %s)\n", name, strings.Join(names, ", "))
			return 2
		}
		opt.Cases = append(opt.Cases, overhead.DefaultCases()[i])
	}
	opt.Nginx = findBinary(*nginx, "nginx")
	opt.HAProxy = findBinary(*haproxy, "haproxy")
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

// findBinary resolves a -nginx / -haproxy flag: "" is none, "auto" the
// installed one (PATH, then /usr/sbin), anything else a path.
func findBinary(flagValue, name string) string {
	if flagValue != "auto" {
		return flagValue
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/" + name); err == nil {
		return "/usr/sbin/" + name
	}
	return ""
}
