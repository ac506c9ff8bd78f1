// Package fleet runs a Sluice fleet on one machine: a redis-server, a
// simulated provider (bench/sim), several `sluice serve` processes sharing
// one provider's ceiling through Redis, and streaming clients on each. It
// prints the fleet-wide in flight, as the provider sees it, against the
// ceiling, and can kill a replica (SIGKILL), stop and restart Redis, or
// have the provider answer one request with 429 and Retry-After, to show
// what the fleet does then. `make cluster-demo` and `sluice-bench
// cluster` run it; its tests assert the issue's numbers.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/sim"
)

// Config is one run.
type Config struct {
	Sluice      string // the sluice binary
	RedisServer string // redis-server binary; "" = from PATH
	Mode        string // limit.fleet: shared or strict
	Algorithm   string // limit.algorithm (fixed shows the coordination alone)
	Ceiling     int
	Initial     int
	Clients     []int // streaming clients per replica; len = replicas
	// Think is the clients' mean think time between requests
	// (exponential; 0: back to back).
	Think time.Duration
	// Output is every answer's length in tokens, 20 ms apart (0: 40,
	// streams of about a second).
	Output int
	// Capacity is how many requests the provider runs at once, the rest
	// waiting inside it (0: 10000, room for everybody), and SoftTTFT how
	// its time to first token grows with them: x(1 + SoftTTFT x
	// running/Capacity). A provider whose latency follows load is what an
	// adaptive controller (-algorithm gradient2) reacts to.
	Capacity  int
	SoftTTFT  float64
	Duration  time.Duration
	Heartbeat time.Duration
	LeaseTTL  time.Duration
	// KillAt > 0: SIGKILL the last replica then.
	KillAt time.Duration
	// RedisDownAt > 0: kill redis-server then; RedisUpAt: start an empty
	// one on the same port.
	RedisDownAt, RedisUpAt time.Duration
	// FreezeAt > 0: one request through the first replica gets 429 with
	// Retry-After (RetryAfter) from the provider.
	FreezeAt   time.Duration
	RetryAfter time.Duration
	// RPM > 0 gives the provider a fleet-wide rate.rpm, counted over
	// RequestWindow (0: a minute).
	RPM           int
	RequestWindow time.Duration
	Out           io.Writer // a progress line per second; nil: none
	Dir           string    // configs and replica logs; "" = a temporary directory
}

// Sample is the fleet at one instant.
type Sample struct {
	At       time.Duration
	Provider int   // requests open at the provider
	Inflight []int // per replica (-1: unreachable)
	Cap      []int
	Limit    []int
	Loss     []float64
	Frozen   []bool
	State    []string
}

// Result is what a run measured.
type Result struct {
	Samples []Sample
	// PeakProvider is the most requests the provider had open at once
	// (exact high-water mark), over the whole run and per phase.
	PeakProvider   int
	PeakBeforeKill int
	PeakAfterKill  int
	// Outcomes per replica: ok, rejected by Sluice, failed (other errors).
	OK, Rejected, Failed []int
	// RecoveredAfterKill: from the kill until the provider had the
	// ceiling (minus one) in flight again, the dead replica's leases
	// expired and taken by the others.
	RecoveredAfterKill time.Duration
	// ResumedAfter: from Redis's restart until every live replica is
	// coordinated again.
	ResumedAfter time.Duration
	// MaxInflightDegraded per replica while Redis was down, and the cap.
	MaxInflightDegraded []int
	CapDegraded         []int
	// FreezeSent is when r1 showed the freeze (the provider's 429 with
	// Retry-After); Frozen per replica: how long after r1 it showed it
	// too (sampled every 100 ms; 1ns = in the same sample); LimitRose:
	// whether its limit's loss part rose before the freeze ended;
	// LossAtFreeze and LossAtThaw: the loss parts then.
	Frozen                   []time.Duration
	LimitRose                []bool
	FreezeSent               time.Duration
	LossAtFreeze, LossAtThaw []float64
	// ProviderRequests reached the provider during Elapsed, the run's
	// load phase (from the first client's start).
	ProviderRequests uint64
	Elapsed          time.Duration
	// Sim is the provider's counters at the end of the run.
	Sim sim.Stats
	// RateSyncs and RateSyncFailures per replica at the end of the run.
	RateSyncs, RateSyncFailures []uint64
}

// Run runs cfg until its Duration has passed or ctx ends.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	n := len(cfg.Clients)
	if n == 0 || cfg.Sluice == "" {
		return nil, errors.New("fleet: need clients per replica and the sluice binary")
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "sluice-fleet-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		cfg.Dir = d
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	ra := cfg.RetryAfter
	if ra == 0 {
		ra = 5 * time.Second
	}
	if cfg.Output <= 0 {
		cfg.Output = 40
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 10000
	}
	// By default a provider with room for everybody: what it counts is
	// what the fleet sends it. It never refuses.
	simSrv := sim.New(sim.Config{Schedule: []sim.Step{{Capacity: cfg.Capacity}}, OverloadFactor: -1, RetryAfter: ra,
		MeanOutputTokens: cfg.Output, OutputSigma: -1, ITL: 20 * time.Millisecond, ITLLoad: -1, SoftTTFT: cfg.SoftTTFT, Seed: 1})
	simLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = simSrv.Serve(simLn) }()
	defer simSrv.Close()
	simPort := simLn.Addr().(*net.TCPAddr).Port

	redisPort, err := freePort()
	if err != nil {
		return nil, err
	}
	rd, err := startRedis(cfg.RedisServer, redisPort)
	if err != nil {
		return nil, err
	}
	defer func() { rd.stop() }()

	reps := make([]*replicaProc, n)
	defer func() {
		for _, r := range reps {
			if r != nil {
				r.stop()
			}
		}
	}()
	for i := range reps {
		if reps[i], err = startReplica(&cfg, cfg.Dir, "r"+strconv.Itoa(i+1), simPort, redisPort); err != nil {
			return nil, err
		}
	}
	r := &run{cfg: cfg, sim: simSrv, redis: rd, reps: reps, res: &Result{}}
	return r.res, r.drive(ctx)
}

type run struct {
	cfg   Config
	sim   *sim.Server
	redis *redisProc
	reps  []*replicaProc
	res   *Result
	start time.Time
	// stopLoad ends the clients of one replica (those of a killed one).
	stopLoad []context.CancelFunc
}

// drive drives the load and the timeline, sampling every 100 ms.
func (r *run) drive(ctx context.Context) error {
	if err := r.waitCoordinated(ctx, 15*time.Second); err != nil {
		return err
	}
	n := len(r.reps)
	res := r.res
	res.OK, res.Rejected, res.Failed = make([]int, n), make([]int, n), make([]int, n)
	res.MaxInflightDegraded, res.CapDegraded = make([]int, n), make([]int, n)
	res.Frozen, res.LimitRose = make([]time.Duration, n), make([]bool, n)
	var wg sync.WaitGroup
	results := make([]*load.Result, n)
	r.stopLoad = make([]context.CancelFunc, n)
	r.sim.ResetMax()
	before := r.sim.Stats().Requests
	r.start = time.Now()
	for i, rep := range r.reps {
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		r.stopLoad[i] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = load.Run(lctx, load.Config{
				URL: "http://127.0.0.1:" + strconv.Itoa(rep.port) + "/sim/v1/chat/completions", Stream: true,
				Clients: r.cfg.Clients[i], Think: r.cfg.Think, Ramp: time.Second, Duration: r.cfg.Duration, Seed: uint64(i + 1),
				Prompt: load.Dist{Mean: 100}, Output: load.Dist{Mean: float64(r.cfg.Output)},
			})
		}()
	}
	r.timeline(ctx)
	wg.Wait()
	res.Elapsed, res.ProviderRequests = time.Since(r.start), r.sim.Stats().Requests-before
	res.Sim = r.sim.Stats()
	for _, rep := range r.reps {
		var ok, failed uint64
		if v, err := rep.status(ctx); err == nil {
			ok, failed = v.Cluster.RateSyncs, v.Cluster.RateSyncFailures
		}
		res.RateSyncs, res.RateSyncFailures = append(res.RateSyncs, ok), append(res.RateSyncFailures, failed)
	}
	for i, lr := range results {
		if lr == nil {
			continue
		}
		for _, rec := range lr.Records {
			switch rec.Outcome {
			case load.OK:
				res.OK[i]++
			case load.RejectedSluice, load.RejectedUpstream:
				res.Rejected[i]++
			case load.Failed:
				res.Failed[i]++
			}
		}
	}
	return ctx.Err()
}

func (r *run) waitCoordinated(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ok := true
		for _, rep := range r.reps {
			if rep.killed {
				continue
			}
			v, err := rep.status(ctx)
			if err != nil || v.Cluster.State != "coordinated" || v.Cluster.Replicas != r.live() {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("fleet: replicas not coordinated within %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *run) live() int {
	n := 0
	for _, rep := range r.reps {
		if !rep.killed {
			n++
		}
	}
	return n
}

// sendFreeze sends one request through the first replica that the
// provider answers with 429 and Retry-After.
func (r *run) sendFreeze() {
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:"+strconv.Itoa(r.reps[0].port)+"/sim/v1/chat/completions",
		strings.NewReader(`{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-sim-fail", "429")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
