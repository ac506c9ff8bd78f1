// Package overhead measures what Sluice costs on the request path against
// other reverse proxies: the same load sent straight to an upstream,
// through nginx, through HAProxy and through Sluice, side by side in one
// run.
//
// Sluice, the upstream, nginx and HAProxy run as separate processes started
// from their binaries, so CPU time (utime+stime from /proc/PID/stat) and
// memory (VmRSS and VmHWM from /proc/PID/status) are per process. The
// upstream is `sluice-bench sim` with no capacity limit; tokens come
// without delay or, per case, a fixed time apart. The load generator
// (bench/load) runs in this process. Everything is on 127.0.0.1.
//
// Two measurements:
//   - Cases: closed-loop clients with no think time, for small
//     non-streaming JSON answers and for SSE streams (OpenAI or Anthropic);
//     per target: completed requests/s, latency percentiles (time to first
//     token for streams), CPU of the proxy process per 1,000 requests. Each
//     round runs every case against every target, the targets' order
//     rotated from case to case; with several rounds the report gives the
//     median of each figure.
//   - Memory with many open streams: fresh Sluice processes, then N
//     streams held open (one token every 2 s), and Sluice's RSS.
//
// Linux only (/proc).
package overhead

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Case is one load: a mode, a dialect, a number of closed-loop clients
// and the answers' shape.
type Case struct {
	Name      string
	Stream    bool
	Anthropic bool // Anthropic Messages (/v1/messages); else OpenAI Chat Completions
	Clients   int
	Tokens    int           // output tokens per answer
	ITL       time.Duration // time between tokens at the upstream; 0: none
}

// DefaultCases are what `sluice-bench overhead` runs unless told
// otherwise: one client (added latency), small JSON at 50 connections,
// and 20-token streams 5 ms apart at 200 and 1,000 concurrent streams.
func DefaultCases() []Case {
	return []Case{
		{Name: "json-1", Clients: 1, Tokens: 16},
		{Name: "sse-1", Stream: true, Clients: 1, Tokens: 16},
		{Name: "json-50", Clients: 50, Tokens: 16},
		{Name: "sse-200", Stream: true, Clients: 200, Tokens: 20, ITL: 5 * time.Millisecond},
		{Name: "sse-1000", Stream: true, Clients: 1000, Tokens: 20, ITL: 5 * time.Millisecond},
		{Name: "anthropic-1000", Stream: true, Anthropic: true, Clients: 1000, Tokens: 20, ITL: 5 * time.Millisecond},
	}
}

// Describe says what the case sends, for the report.
func (c Case) Describe() string {
	if !c.Stream {
		return fmt.Sprintf("non-streaming JSON (%d-token answer), %d client(s)", c.Tokens, c.Clients)
	}
	d := "OpenAI"
	if c.Anthropic {
		d = "Anthropic"
	}
	itl := "tokens without delay"
	if c.ITL > 0 {
		itl = fmt.Sprintf("%v between tokens", c.ITL)
	}
	return fmt.Sprintf("%s SSE streams of %d tokens, %s, %d concurrent", d, c.Tokens, itl, c.Clients)
}

// Targets, in the order of the report.
const (
	Direct   = "direct"
	Nginx    = "nginx"
	HAProxy  = "haproxy"
	Sluice   = "sluice"    // algorithm: fixed
	SluiceG2 = "sluice-g2" // gradient2, the default algorithm
	SluiceB  = "sluice-b"  // another sluice binary (Options.CompareSluice), algorithm: fixed
	SluiceP1 = "sluice-p1" // algorithm: fixed, GOMAXPROCS=1
)

// Options configure Run.
type Options struct {
	// Sluice is the sluice binary; Bench the sluice-bench binary (for the
	// upstream, `sluice-bench sim`). Both required.
	Sluice, Bench string
	// Nginx and HAProxy, when set, are binaries to compare against.
	Nginx, HAProxy string
	// Gradient2 also runs a second Sluice with the default algorithm.
	Gradient2 bool
	// OneProc also runs Sluice (fixed) with GOMAXPROCS=1.
	OneProc bool
	// CompareSluice, when set, is another sluice binary (a build before a
	// change, say) run beside Sluice with the same config, as "sluice-b".
	CompareSluice string
	// Cases to run; nil means DefaultCases.
	Cases []Case
	// Rounds is how many times every case runs against every target; the
	// report gives medians. 0 means 1.
	Rounds int
	// Duration is the length of each measurement; 0 means 5 s.
	Duration time.Duration
	// Streams is how many streams the memory run holds open; 0 means
	// 10,000, negative skips the memory run.
	Streams int
	// Dir holds the generated configs; "" means a new temporary directory.
	Dir string
	// Logf receives progress; nil discards it.
	Logf func(format string, args ...any)
}

// Report is everything Run measured.
type Report struct {
	Started  time.Time
	Machine  string
	Options  Options `json:"-"`
	Cases    []Case
	Targets  []string
	Rounds   int
	Duration time.Duration
	// Load is the machine's 1-minute load average at the start of each
	// round (/proc/loadavg).
	Load []float64
	// Runs holds one entry per round, case and target, in run order.
	Runs []Measurement
	// Idle is each proxy's memory after start and warm-up; Peak its
	// high-water mark after all runs.
	Idle, Peak map[string]memory
	// Streams is the memory run per Sluice target; nil when skipped.
	Streams map[string]*StreamsResult
	// FileLimit is the open-file limit the processes ran with.
	FileLimit uint64
}

// Measurement is one target in one case of one round.
type Measurement struct {
	Round      int
	Case       string
	Target     string
	OK, Failed int
	RPS        float64
	// TTFB, TTFT (streams) and Total latencies of OK requests.
	TTFB, TTFT, Total percentiles
	// ProxyCPU is the CPU time the proxy process used during the run (0
	// for direct); UpstreamCPU the upstream's.
	ProxyCPU, UpstreamCPU time.Duration
	// ProxyRSS is the proxy's resident set after the run.
	ProxyRSS int64
}

// percentiles is the part of load.Percentiles the report uses.
type percentiles struct {
	N             int
	P50, P90, P99 time.Duration
}

// CPUPer1k returns the proxy CPU per 1,000 OK requests.
func (m *Measurement) CPUPer1k() time.Duration {
	if m.OK == 0 {
		return 0
	}
	return m.ProxyCPU * 1000 / time.Duration(m.OK)
}

// StreamsResult is the memory run of one Sluice configuration.
type StreamsResult struct {
	// Requested is Options.Streams; Open how many were held open.
	Requested, Open int
	// Procs is how many Sluice processes shared the streams (more than one
	// when one process may not hold two sockets per stream).
	Procs int
	// OpenIn is how long it took to get every stream's first token.
	OpenIn time.Duration
	// Idle is the Sluice processes' memory before the streams, Loaded
	// with them open (summed over the processes).
	Idle, Loaded memory
	// Upstream is the simulator's memory with the streams open.
	Upstream memory
}

// PerStream returns the RSS added per open stream.
func (s *StreamsResult) PerStream() int64 {
	if s.Open == 0 {
		return 0
	}
	return (s.Loaded.RSS - s.Idle.RSS) / int64(s.Open)
}

// Run runs the measurements. It starts and stops every process itself and
// returns an error if any fails to start or any run fails entirely.
func Run(ctx context.Context, opt Options) (*Report, error) {
	if runtime.GOOS != "linux" {
		return nil, errors.New("overhead: needs Linux (/proc)")
	}
	if opt.Sluice == "" || opt.Bench == "" {
		return nil, errors.New("overhead: Sluice and Bench binaries are required")
	}
	if opt.Cases == nil {
		opt.Cases = DefaultCases()
	}
	opt.Rounds = max(opt.Rounds, 1)
	if opt.Duration <= 0 {
		opt.Duration = 5 * time.Second
	}
	if opt.Streams == 0 {
		opt.Streams = 10000
	}
	if opt.Logf == nil {
		opt.Logf = func(string, ...any) {}
	}
	if opt.Dir == "" {
		d, err := os.MkdirTemp("", "sluice-overhead-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		opt.Dir = d
	}
	rep := &Report{
		Started: time.Now(), Options: opt, Cases: opt.Cases, Rounds: opt.Rounds, Duration: opt.Duration,
		Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version()),
		Idle:    map[string]memory{}, Peak: map[string]memory{},
	}
	// Sluice holds two sockets per stream, the simulator and this process
	// one each.
	rep.FileLimit = raiseFileLimit(uint64(max(opt.Streams, 1000))*2 + 4096)

	r := &runner{opt: opt, logf: opt.Logf, procs: map[string]*proc{}}
	defer r.stopAll()
	if err := r.startAll(); err != nil {
		return nil, err
	}
	rep.Targets = r.targets
	if err := r.warmUp(ctx); err != nil {
		return nil, err
	}
	for _, t := range r.targets {
		if p := r.procs[t]; p != nil {
			m, err := p.memory()
			if err != nil {
				return nil, err
			}
			rep.Idle[t] = m
		}
	}
	for round := range opt.Rounds {
		rep.Load = append(rep.Load, loadAverage())
		opt.Logf("round %d of %d, load average %.2f", round+1, opt.Rounds, rep.Load[round])
		for ci, c := range opt.Cases {
			for k := range r.targets {
				// Rotate the order from case to case and round to round, so
				// no target always runs first or right after another.
				t := r.targets[(k+ci+round)%len(r.targets)]
				m, err := r.measure(ctx, c, t, opt.Duration)
				if err != nil {
					return nil, err
				}
				m.Round = round
				opt.Logf("%-14s %-9s %8.0f ok/s  p50 %v  ttft p50 %v  proxy CPU/1k %v", c.Name, t, m.RPS,
					m.Total.P50, m.TTFT.P50, m.CPUPer1k())
				rep.Runs = append(rep.Runs, m)
			}
		}
	}
	for _, t := range r.targets {
		if p := r.procs[t]; p != nil {
			m, err := p.memory()
			if err != nil {
				return nil, err
			}
			rep.Peak[t] = m
		}
	}
	if opt.Streams > 0 {
		rep.Streams = map[string]*StreamsResult{}
		for _, t := range []string{Sluice, SluiceG2} {
			if r.procs[t] == nil {
				continue
			}
			s, err := r.streams(ctx, t, opt.Streams, rep.FileLimit)
			if err != nil {
				return nil, err
			}
			rep.Streams[t] = s
		}
	}
	return rep, nil
}

// loadAverage returns the 1-minute load average, or -1.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%f", &l); err != nil {
		return -1
	}
	return l
}
