// Package overhead measures what Sluice costs on the request path: the same
// load sent straight to an upstream and through Sluice (and, optionally,
// through nginx as a plain reverse proxy), side by side in one run.
//
// Sluice, the upstream and nginx run as separate processes started from
// their binaries, so CPU time (utime+stime from /proc/PID/stat) and memory
// (VmRSS and VmHWM from /proc/PID/status) are per process. The upstream is
// `sluice-bench sim` with no capacity limit and instant tokens; the load
// generator (bench/load) runs in this process. Everything is on 127.0.0.1.
//
// Two measurements:
//   - Throughput and latency: closed-loop clients with no think time, for
//     small non-streaming JSON answers and for SSE streams, at several
//     concurrencies; per target: requests/s, latency percentiles, CPU of
//     the proxy process per 1,000 requests. Added latency is the
//     difference of percentiles between the proxied and the direct run.
//   - Memory with many open streams: a fresh Sluice process, then N
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
	"time"

	"github.com/sluicehq/sluice/bench/load"
)

// Options configure Run.
type Options struct {
	// Sluice is the sluice binary; Bench the sluice-bench binary (for the
	// upstream, `sluice-bench sim`). Both required.
	Sluice, Bench string
	// Nginx, when set, is an nginx binary to compare against.
	Nginx string
	// Concurrency lists the client counts; nil means 1, 16, 64, 256.
	Concurrency []int
	// Duration is the length of each throughput measurement; 0 means 5 s.
	Duration time.Duration
	// Tokens is the output of each request (tokens); 0 means 16.
	Tokens int
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
	Started     time.Time
	Machine     string
	Options     Options `json:"-"`
	Concurrency []int
	Duration    time.Duration
	Tokens      int
	// Runs holds one entry per mode, concurrency and target, in run order.
	Runs []Measurement
	// SluiceIdle is Sluice's memory after start and warm-up; SluicePeak
	// its high-water mark after all throughput runs. NginxPeak likewise.
	SluiceIdle, SluicePeak memory
	NginxPeak              memory
	// Streams is the memory run; nil when skipped.
	Streams *StreamsResult
	// FileLimit is the open-file limit the processes ran with.
	FileLimit uint64
}

// Measurement is one target at one concurrency.
type Measurement struct {
	Mode        string // "json" or "sse"
	Concurrency int
	Target      string // "direct", "sluice" or "nginx"
	OK, Failed  int
	RPS         float64
	// TTFB, TTFT (streams) and Total latencies of OK requests.
	TTFB, TTFT, Total load.Percentiles
	// ProxyCPU is the CPU time the proxy process used during the run (0
	// for direct); UpstreamCPU the upstream's.
	ProxyCPU, UpstreamCPU time.Duration
	// ProxyRSS is the proxy's resident set after the run.
	ProxyRSS int64
}

// CPUPer1k returns the proxy CPU per 1,000 OK requests.
func (m *Measurement) CPUPer1k() time.Duration {
	if m.OK == 0 {
		return 0
	}
	return m.ProxyCPU * 1000 / time.Duration(m.OK)
}

// StreamsResult is the memory run.
type StreamsResult struct {
	// Requested is Options.Streams; Open how many were held open (fewer
	// when the open-file limit does not allow Requested).
	Requested, Open int
	// OpenIn is how long it took to get every stream's first token.
	OpenIn time.Duration
	// Idle is Sluice's memory before the streams, Loaded with them open.
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

// AtRequested returns the RSS with Requested streams: measured when all
// were open, else extrapolated linearly from the streams that were.
func (s *StreamsResult) AtRequested() int64 {
	if s.Open >= s.Requested {
		return s.Loaded.RSS
	}
	return s.Idle.RSS + s.PerStream()*int64(s.Requested)
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
	if opt.Concurrency == nil {
		opt.Concurrency = []int{1, 16, 64, 256}
	}
	if opt.Duration <= 0 {
		opt.Duration = 5 * time.Second
	}
	if opt.Tokens <= 0 {
		opt.Tokens = 16
	}
	if opt.Streams == 0 {
		opt.Streams = 10000
	}
	logf := opt.Logf
	if logf == nil {
		logf = func(string, ...any) {}
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
		Started: time.Now(), Options: opt, Concurrency: opt.Concurrency, Duration: opt.Duration, Tokens: opt.Tokens,
		Machine: fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version()),
	}
	// Sluice holds two sockets per stream, the simulator one, this process
	// one. Where the open-file limit cannot be raised far enough, the
	// memory run holds as many streams as fit and extrapolates.
	rep.FileLimit = raiseFileLimit(uint64(max(opt.Streams, 1000))*2 + 4096)
	streams := opt.Streams
	if fit := (int(rep.FileLimit) - 100) / 2; streams > fit {
		logf("open-file limit %d: the memory run holds %d streams instead of %d", rep.FileLimit, fit, streams)
		streams = fit
	}

	r := &runner{opt: opt, logf: logf}
	defer r.stopAll()
	if err := r.startUpstream(); err != nil {
		return nil, err
	}
	if err := r.startSluice(); err != nil {
		return nil, err
	}
	targets := []string{"direct", "sluice"}
	if opt.Nginx != "" {
		if err := r.startNginx(); err != nil {
			return nil, err
		}
		targets = append(targets, "nginx")
	}

	// Warm up every path (connections, pools, JIT-free but page-faulting).
	for _, mode := range []string{"json", "sse"} {
		for _, t := range targets {
			if _, err := r.measure(ctx, mode, 8, t, min(opt.Duration/4, time.Second)); err != nil {
				return nil, err
			}
		}
	}
	var err error
	if rep.SluiceIdle, err = r.sluice.memory(); err != nil {
		return nil, err
	}
	for _, mode := range []string{"json", "sse"} {
		for _, c := range opt.Concurrency {
			for _, t := range targets {
				m, err := r.measure(ctx, mode, c, t, opt.Duration)
				if err != nil {
					return nil, err
				}
				logf("%s c=%d %-6s %8.0f req/s  p50 %v  p99 %v  proxy CPU/1k %v", mode, c, t, m.RPS, m.Total.P50, m.Total.P99, m.CPUPer1k())
				rep.Runs = append(rep.Runs, m)
			}
		}
	}
	if rep.SluicePeak, err = r.sluice.memory(); err != nil {
		return nil, err
	}
	if r.nginx != nil {
		if rep.NginxPeak, err = r.nginx.memory(); err != nil {
			return nil, err
		}
	}
	if opt.Streams > 0 {
		if rep.Streams, err = r.streams(ctx, streams); err != nil {
			return nil, err
		}
		rep.Streams.Requested = opt.Streams
	}
	return rep, nil
}
