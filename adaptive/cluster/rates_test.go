package cluster

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// rateReplica is an in-process replica with one provider ("p") whose
// rate: block is rs.
type rateReplica struct {
	*replica
	rates *adaptive.Rates
}

func newRateReplica(t *testing.T, c *redis.Client, id string, rs settings.Rate, fs settings.Fleet) *rateReplica {
	t.Helper()
	reg := adaptive.NewRegistry(nil)
	ps := adaptive.DefaultProviderSettings(limiterSettings(settings.AlgorithmFixed, settings.FleetShared, 1000))
	ps.Rate = rs
	provs, err := reg.ReconcileProviders(map[string]adaptive.ProviderSettings{"p": ps})
	if err != nil {
		t.Fatal(err)
	}
	co, err := New(Options{Client: c, ReplicaID: id, KeyPrefix: "test", Settings: fs, Limiters: reg.Limiters, Rates: reg.Rates,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	co.Attach()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { co.Run(ctx); close(done) }()
	var once sync.Once
	r := &rateReplica{replica: &replica{id: id, lim: provs["p"].Limiter, co: co}, rates: provs["p"].Rates}
	r.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(r.stop)
	return r
}

func rateMode(rs ...*rateReplica) func() bool {
	return func() bool {
		for _, r := range rs {
			if _, leased := r.rates.InFleet(); !leased {
				return false
			}
		}
		return true
	}
}

func local(rs ...*rateReplica) func() bool {
	return func() bool {
		for _, r := range rs {
			if joined, leased := r.rates.InFleet(); !joined || leased {
				return false
			}
		}
		return true
	}
}

// rpmPerSecond is 6000 requests per minute counted over 1 s: a bucket of
// 100 refilled at 100/s, a 60 RPM limit in a sixtieth of the time.
func rpmPerSecond() settings.Rate {
	rs := settings.DefaultRate()
	rs.PerMinute, rs.RequestWindow = settings.PerMinute{RPM: 6000}, time.Second
	return rs
}

// hammer sends requests through r's rate layer from n goroutines until
// ctx ends, as a proxy would (a refusal from the pool is tried again after
// its Retry-After), and counts those admitted.
func hammer(ctx context.Context, wg *sync.WaitGroup, r *rateReplica, n int, admitted *atomic.Int64) {
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var res adaptive.Reservation
				now := time.Now()
				dec := r.rates.Reserve(now, 0, adaptive.Demand{InputTokens: 10, OutputTokens: 10}, nil, 0, &res)
				if dec.Limited || dec.TooLarge {
					t := time.NewTimer(max(dec.RetryAfter, time.Millisecond))
					select {
					case <-t.C:
					case <-ctx.Done():
						t.Stop()
					}
					continue
				}
				admitted.Add(1)
				res.Settle(now, adaptive.Usage{Sent: true, InputTokens: 10, OutputTokens: 10})
			}
		}()
	}
}

// Three replicas sharing a 100-request bucket refilled at 100/s (60 RPM
// scaled to a second) admit at most the bucket plus its refill over the
// run fleet-wide, with no slack: a token is in one place at a time. And
// they use it: the pools do not strand much of the fleet's rate.
func TestFleetRateHoldsAcrossReplicas(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	a := newRateReplica(t, rs.client(t), "a", rpmPerSecond(), fs)
	b := newRateReplica(t, rs.client(t), "b", rpmPerSecond(), fs)
	c := newRateReplica(t, rs.client(t), "c", rpmPerSecond(), fs)
	testutil.Eventually(t, "quotas leased from the fleet", 5*time.Second, rateMode(a, b, c))

	var n [3]atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	for i, r := range []*rateReplica{a, b, c} {
		hammer(ctx, &wg, r, 8, &n[i])
	}
	time.Sleep(2 * time.Second)
	cancel()
	wg.Wait()
	elapsed := time.Since(start)
	total := n[0].Load() + n[1].Load() + n[2].Load()
	bound := 100 + int64(100*elapsed.Seconds()) + 1
	t.Logf("admitted %d (a %d, b %d, c %d) in %s; bound (bucket + refill) %d; %.1f per minute-equivalent of 6000",
		total, n[0].Load(), n[1].Load(), n[2].Load(), elapsed.Round(time.Millisecond), bound, float64(total)/elapsed.Minutes())
	if total > bound {
		t.Errorf("fleet admitted %d, more than the bucket plus its refill (%d)", total, bound)
	}
	if total < bound*6/10 {
		t.Errorf("fleet admitted %d of %d available: the pools strand the rate", total, bound)
	}
	for i := range n {
		if n[i].Load() < total/10 {
			t.Errorf("replica %d admitted %d of %d: starved", i, n[i].Load(), total)
		}
	}
}

// Requests that use less than they reserved, more, or never reach the
// provider, settled on three replicas at once: once the replicas hand
// their pools back, the fleet's bucket has been charged exactly what was
// used, in requests and in tokens.
func TestFleetRateSettlesExactly(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := settings.DefaultRate()
	set.PerMinute = settings.PerMinute{RPM: 1_000_000, TPM: 100_000_000}
	var reps []*rateReplica
	for _, id := range []string{"a", "b", "c"} {
		reps = append(reps, newRateReplica(t, rs.client(t), id, set, fs))
	}
	testutil.Eventually(t, "quotas leased from the fleet", 5*time.Second, rateMode(reps...))

	var wantReq, wantTok atomic.Int64
	var wg sync.WaitGroup
	for i, r := range reps {
		for g := range 4 {
			wg.Add(1)
			go func(seed uint64) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, 1))
				for range 300 {
					in, out := 1+rng.IntN(2000), 1+rng.IntN(1000)
					var res adaptive.Reservation
					dec := r.rates.Reserve(time.Now(), 0, adaptive.Demand{InputTokens: in, OutputTokens: out}, nil, 0, &res)
					if dec.Limited || dec.TooLarge {
						time.Sleep(max(dec.RetryAfter, time.Millisecond))
						continue
					}
					if rng.IntN(20) == 0 {
						time.Sleep(time.Millisecond) // a request in flight across a sync
					}
					var u adaptive.Usage
					switch rng.IntN(4) {
					case 0: // cancelled before it was sent
					case 1: // used less output than reserved
						u = adaptive.Usage{Sent: true, InputTokens: in, OutputTokens: rng.IntN(out)}
					case 2: // the prompt was larger than estimated
						u = adaptive.Usage{Sent: true, InputTokens: in + rng.IntN(3000), OutputTokens: out}
					default: // sent, failed, used no tokens
						u = adaptive.Usage{Sent: true}
					}
					if u.Sent {
						wantReq.Add(1)
						wantTok.Add(int64(u.InputTokens + u.OutputTokens))
					}
					res.Settle(time.Now(), u)
				}
			}(uint64(10*i + g))
		}
	}
	wg.Wait()
	for _, r := range reps {
		r.stop() // hands the pool back
	}
	h, err := rs.client(t).HGetAll(context.Background(), "{test}:rate:p").Result()
	if err != nil {
		t.Fatal(err)
	}
	gotReq, _ := strconv.ParseInt(h["u"+strconv.Itoa(int(adaptive.DimRequests))], 10, 64)
	gotTok, _ := strconv.ParseInt(h["u"+strconv.Itoa(int(adaptive.DimTokens))], 10, 64)
	t.Logf("charged fleet-wide: %d requests, %d tokens; used: %d, %d", gotReq, gotTok, wantReq.Load(), wantTok.Load())
	if gotReq != wantReq.Load() || gotTok != wantTok.Load() {
		t.Fatalf("fleet charged %d requests and %d tokens, requests used %d and %d", gotReq, gotTok, wantReq.Load(), wantTok.Load())
	}
}

// Redis stopped under load: no request fails because of it, each replica
// holds at most its third of the bucket and of the refill; Redis back:
// the quotas are leased from the fleet again.
func TestFleetRateDegradedHoldsAThird(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	reps := []*rateReplica{
		newRateReplica(t, rs.client(t), "a", rpmPerSecond(), fs),
		newRateReplica(t, rs.client(t), "b", rpmPerSecond(), fs),
		newRateReplica(t, rs.client(t), "c", rpmPerSecond(), fs),
	}
	testutil.Eventually(t, "quotas leased from the fleet", 5*time.Second, rateMode(reps...))
	testutil.Eventually(t, "three replicas seen", 5*time.Second, coordinated(reps[0].replica, reps[1].replica, reps[2].replica))

	rs.stop()
	testutil.Eventually(t, "quotas local", 10*time.Second, local(reps...))
	for _, r := range reps {
		if st := r.co.Status(); st.State != StateDegraded || st.Providers[0].Rate.Mode != "local" {
			t.Fatalf("replica %s: state %s, rate mode %s; want degraded, local", r.id, st.State, st.Providers[0].Rate.Mode)
		}
	}
	var n [3]atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	for i, r := range reps {
		hammer(ctx, &wg, r, 4, &n[i])
	}
	time.Sleep(1500 * time.Millisecond)
	cancel()
	wg.Wait()
	elapsed := time.Since(start)
	bound := 100/3 + int64(100/3.0*elapsed.Seconds()) + 1
	for i := range n {
		t.Logf("replica %d admitted %d in %s while Redis was down (bound %d)", i, n[i].Load(), elapsed.Round(time.Millisecond), bound)
		if n[i].Load() > bound {
			t.Errorf("replica %d admitted %d, more than a third of the bucket and refill (%d)", i, n[i].Load(), bound)
		}
		if n[i].Load() < int64(100/3.0*elapsed.Seconds())/2 {
			t.Errorf("replica %d admitted %d: requests failed for want of Redis", i, n[i].Load())
		}
	}

	rs.restart()
	d := testutil.Eventually(t, "quotas leased again", 5*time.Second, rateMode(reps...))
	t.Logf("leased again %s after Redis restarted", d.Round(time.Millisecond))
}
