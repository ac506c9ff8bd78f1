package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// replica is one in-process Sluice replica: a registry with one provider
// ("p") and its coordinator.
type replica struct {
	id   string
	lim  *adaptive.Limiter
	co   *Coordinator
	stop func()
}

func fleetSettings(hb, ttl time.Duration) settings.Fleet {
	return settings.Fleet{Heartbeat: hb, LeaseTTL: ttl, ExpectedReplicas: 3}
}

func limiterSettings(alg, mode string, ceiling int) adaptive.LimiterSettings {
	s := settings.DefaultLimit()
	s.Algorithm, s.Fleet, s.Ceiling, s.Initial, s.Min = alg, mode, ceiling, ceiling, 1
	if alg == settings.AlgorithmAIMD {
		s.Initial = ceiling / 6 // under a third of the ceiling: the fleet cap does not bind
		s.Cooldown = 0
	}
	q := settings.DefaultQueue()
	q.MaxWaiting, q.MaxWait = 10000, time.Minute
	return adaptive.LimiterSettings{Limit: s, Queue: q}
}

// newReplica builds a replica on client c; run starts its coordinator.
func newReplica(t *testing.T, c *redis.Client, id string, set adaptive.LimiterSettings, fs settings.Fleet, run bool) *replica {
	t.Helper()
	reg := adaptive.NewRegistry(nil)
	lims, err := reg.Reconcile(map[string]adaptive.LimiterSettings{"p": set})
	if err != nil {
		t.Fatal(err)
	}
	co, err := New(Options{Client: c, ReplicaID: id, KeyPrefix: "test", Settings: fs, Limiters: reg.Limiters,
		Logger: slog.New(slog.NewTextHandler(tWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, lim: lims["p"], co: co, stop: func() {}}
	co.Attach() // as cmd/sluice does before serving
	if run {
		r.start(t)
	}
	return r
}

// start runs r's cluster loop until the test ends (or r.stop).
func (r *replica) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.co.Run(ctx); close(done) }()
	var once sync.Once
	r.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(r.stop)
}

func (r *replica) provider() ProviderStatus { return r.co.Status().Providers[0] }

// fleetMeter counts requests in flight across every replica, as the
// provider would see them (between a granted lease and Finish).
type fleetMeter struct {
	now, peak atomic.Int64
	served    atomic.Int64
}

func (m *fleetMeter) enter() {
	n := m.now.Add(1)
	for {
		p := m.peak.Load()
		if n <= p || m.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (m *fleetMeter) leave() { m.now.Add(-1); m.served.Add(1) }

// clients runs n closed-loop clients on r until ctx ends: acquire, lease,
// hold for hold, finish.
func clients(ctx context.Context, wg *sync.WaitGroup, r *replica, n int, hold time.Duration, m *fleetMeter) {
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var p adaptive.Permit
				if err := r.lim.Acquire(time.Now(), adaptive.Flow{}, ctx.Done(), &p); err != nil {
					continue
				}
				if err := p.Lease(ctx.Done()); err != nil {
					p.Finish(time.Now(), adaptive.Outcome{})
					continue
				}
				m.enter()
				t := time.NewTimer(hold)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
				}
				m.leave()
				p.Finish(time.Now(), adaptive.Outcome{Kind: adaptive.OutcomeSuccess})
			}
		}()
	}
}

// startFleet starts a running replica per id, each on its own connection
// to rs, and waits until every one of them is coordinated and sees them
// all.
func startFleet(t *testing.T, rs *redisServer, set adaptive.LimiterSettings, fs settings.Fleet, ids ...string) []*replica {
	t.Helper()
	reps := make([]*replica, len(ids))
	for i, id := range ids {
		reps[i] = newReplica(t, rs.client(t), id, set, fs, true)
	}
	testutil.Eventually(t, fmt.Sprintf("%d replicas coordinated", len(ids)), 5*time.Second, coordinated(reps...))
	return reps
}

// coordinated reports whether every replica of rs is coordinated and sees
// len(rs) replicas of its provider.
func coordinated(rs ...*replica) func() bool {
	return func() bool {
		for _, r := range rs {
			s := r.co.Status()
			if s.State != StateCoordinated || s.Providers[0].Replicas != len(rs) {
				return false
			}
		}
		return true
	}
}

// tWriter sends a coordinator's log to the test's log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}
