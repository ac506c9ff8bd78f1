package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/sluicehq/sluice/bench/sim"
)

func init() {
	register("sim", "run a simulated LLM provider with a hidden capacity (see bench/sim)", runSim)
}

// runSim serves bench/sim until ctx is cancelled (SIGINT/SIGTERM), then
// aborts the requests in progress, prints the final Stats as one JSON line
// on stdout and returns 0. Log lines go to stderr.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sluice-bench sim [flags]\n\nServes POST /v1/chat/completions, /v1/messages and /v1/responses, GET /sim/stats\nand POST /sim/capacity?c=N. Durations are model time (real = model * timescale).\n\nflags:")
		fs.PrintDefaults()
	}
	var (
		listen    = fs.String("listen", "127.0.0.1:8081", "address to listen on (keep it on loopback)")
		shape     = fs.String("shape", "queue", "load shape: queue (C run, the rest queue), knee (all run, latency x running/C beyond C) or no-knee (all run, latency x (1 + rise*running/C), never refused for load)")
		rise      = fs.Float64("rise", sim.DefaultRise, "no-knee shape: latency rise at C running (negative: none)")
		capacity  = fs.Int("capacity", sim.DefaultCapacity, "constant capacity C when -schedule is empty (the knee of -shape knee)")
		schedule  = fs.String("schedule", "", `capacity schedule, e.g. "40,20@60s,40@120s" (overrides -capacity)`)
		timescale = fs.Float64("timescale", 1, "real time per model time unit (0.1 = 10x faster)")
		seed      = fs.Uint64("seed", 1, "random seed")
		overload  = fs.Float64("overload", sim.DefaultOverloadFactor, "reject when running+queued >= overload*C (negative: never)")
		retry     = fs.Duration("retry-after", sim.DefaultRetryAfter, "retry-after advertised on 429/529 (negative: none)")
		rps       = fs.Float64("rps", 0, "hard rate limit in requests per second (0: none)")
		burst     = fs.Int("burst", 0, "rate-limit bucket size (0: max(1, rps))")
		quota     = fs.Bool("quota-exhausted", false, "answer every request with insufficient_quota")
		quotaRPM  = fs.Int("quota-rpm", 0, "an account's requests per minute (real minutes x timescale; 0: none): 429 rate_limit_exceeded beyond it")
		quotaTPM  = fs.Int("quota-tpm", 0, "an account's tokens per minute (prompt + max_tokens; 0: none)")
		quotaHdrs = fs.String("quota-headers", sim.QuotaHeadersOpenAI, "rate-limit headers on every answer with -quota-rpm/-quota-tpm: openai, anthropic or none")
		quotaPer  = fs.String("quota-per", "", "what one quota is: empty (one for all requests), key (each API key its own account), model (each model its own), key+model")
		baseTTFT  = fs.Duration("base-ttft", sim.DefaultBaseTTFT, "fixed part of TTFT")
		prefill   = fs.Float64("prefill-rate", sim.DefaultPrefillRate, "prompt tokens per second of prefill")
		jitter    = fs.Float64("jitter", sim.DefaultJitterSigma, "sigma of the lognormal TTFT jitter (negative: none)")
		softTTFT  = fs.Float64("soft-ttft", 0, "TTFT load factor: x(1 + soft*running/C) (queue shape)")
		itl       = fs.Duration("itl", sim.DefaultITL, "base inter-token latency")
		itlLoad   = fs.Float64("itl-load", sim.DefaultITLLoad, "ITL load factor: x(1 + load*running/C) (queue shape; negative: none)")
		itlJitter = fs.Float64("itl-jitter", 0, "sigma of a per-token lognormal ITL jitter")
		meanOut   = fs.Int("mean-output", sim.DefaultMeanOutputTokens, "mean output tokens")
		maxOut    = fs.Int("max-output", sim.DefaultMaxOutputTokens, "output tokens cap")
		fault     = fs.String("fault", "", "inject a fault into requests: 429, 500, 502, 503, 529, reset-mid-stream, hang")
		faultRate = fs.Float64("fault-rate", 0, "probability of -fault per request (0: every request)")
		faultK    = fs.Int("fault-after", sim.DefaultResetAfter, "events before a reset-mid-stream drop")
		every     = fs.Duration("stats-interval", 0, "also log stats to stderr this often in real time (0: only at exit)")
	)
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	steps := []sim.Step{{Capacity: *capacity}}
	if *schedule != "" {
		var err error
		if steps, err = sim.ParseSchedule(*schedule); err != nil {
			fmt.Fprintf(stderr, "sim: -schedule: %v\n", err)
			return 2
		}
	}
	sh, err := sim.ParseShape(*shape)
	if err != nil {
		fmt.Fprintf(stderr, "sim: -shape: %v\n", err)
		return 2
	}
	if *capacity < 0 {
		fmt.Fprintln(stderr, "sim: -capacity must be >= 0")
		return 2
	}
	if *timescale <= 0 {
		fmt.Fprintln(stderr, "sim: -timescale must be > 0")
		return 2
	}
	switch *quotaPer {
	case "", sim.QuotaPerKey, sim.QuotaPerModel, sim.QuotaPerKeyModel:
	default:
		fmt.Fprintf(stderr, "sim: -quota-per: want key, model or key+model, got %q\n", *quotaPer)
		return 2
	}
	switch *quotaHdrs {
	case sim.QuotaHeadersOpenAI, sim.QuotaHeadersAnthropic:
	case "none":
		*quotaHdrs = ""
	default:
		fmt.Fprintf(stderr, "sim: -quota-headers: want openai, anthropic or none, got %q\n", *quotaHdrs)
		return 2
	}
	fk := sim.FaultKind(*fault)
	switch fk {
	case sim.FaultNone, sim.FaultReset, sim.FaultHang, sim.Fault429, sim.Fault500, sim.Fault502, sim.Fault503, sim.Fault529:
	default:
		fmt.Fprintf(stderr, "sim: -fault: unknown fault %q\n", *fault)
		return 2
	}
	cfg := sim.Config{
		Shape:            sh,
		Rise:             orOffF(*rise),
		Schedule:         steps,
		OverloadFactor:   *overload,
		RetryAfter:       *retry,
		RateLimitRPS:     *rps,
		RateLimitBurst:   *burst,
		QuotaExhausted:   *quota,
		Quota:            sim.Quota{RPM: *quotaRPM, TPM: *quotaTPM, Headers: *quotaHdrs, Per: *quotaPer},
		BaseTTFT:         orOff(*baseTTFT),
		PrefillRate:      orOffF(*prefill),
		JitterSigma:      orOffF(*jitter),
		SoftTTFT:         *softTTFT,
		ITL:              orOff(*itl),
		ITLLoad:          orOffF(*itlLoad),
		ITLJitter:        *itlJitter,
		MeanOutputTokens: *meanOut,
		MaxOutputTokens:  *maxOut,
		Fault:            sim.Fault{Kind: fk, Rate: *faultRate, After: *faultK},
		TimeScale:        *timescale,
		Seed:             *seed,
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "sim: %v\n", err)
		return 1
	}
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		fmt.Fprintf(stderr, "sim: warning: listening on non-loopback address %s\n", ta)
	}
	s := sim.New(cfg)
	fmt.Fprintf(stderr, "sim: listening on http://%s shape=%s schedule=%s timescale=%g seed=%d\n",
		ln.Addr(), sh, sim.FormatSchedule(steps), *timescale, *seed)

	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	var tick <-chan time.Time
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		tick = t.C
	}
	code := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-served:
			fmt.Fprintf(stderr, "sim: serve: %v\n", err)
			code = 1
			break loop
		case <-tick:
			fmt.Fprintf(stderr, "sim: stats %s\n", statsJSON(s.Stats()))
		}
	}
	_ = s.Close()
	fmt.Fprintf(stdout, "%s\n", statsJSON(s.Stats()))
	return code
}

// orOff maps an explicit 0 flag value to the "off" setting of sim.Config
// (negative), since 0 there means "default".
func orOff(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func orOffF(f float64) float64 {
	if f == 0 {
		return -1
	}
	return f
}

func statsJSON(st sim.Stats) []byte {
	b, _ := json.Marshal(st) // Stats always marshals
	return b
}
