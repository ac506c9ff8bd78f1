package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// Values read from Redis are bounded: whatever a peer (or a write to
// Redis) put there, a replica takes no more than it could have decided
// itself.

// syncBuffer is a log a coordinator writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runLogged starts a replica of provider p on c whose log goes to the
// returned buffer.
func runLogged(t *testing.T, c *redis.Client, id string, set adaptive.LimiterSettings, fs settings.Fleet) (*replica, *syncBuffer) {
	t.Helper()
	reg := adaptive.NewRegistry(nil)
	lims, err := reg.Reconcile(map[string]adaptive.LimiterSettings{"p": set})
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	co, err := New(Options{Client: c, ReplicaID: id, KeyPrefix: "test", Settings: fs, Limiters: reg.Limiters,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, lim: lims["p"], co: co}
	co.Attach()
	r.start(t)
	return r, log
}

// redisNowMs is Redis's clock, in ms.
func redisNowMs(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

const decade = 10 * 365 * 24 * time.Hour

// A fleet freeze in Redis ten years away freezes growth for the longest a
// replica could decide itself, once: not for ten years, and not again at
// every heartbeat that reads the key.
func TestRemoteFreezeIsCapped(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	c := rs.client(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	a, log := runLogged(t, rs.client(t), "a", limiterSettings(settings.AlgorithmAIMD, settings.FleetShared, 30), fs)
	testutil.Eventually(t, "a coordinated", 5*time.Second, coordinated(a))
	far := redisNowMs(t, c) + decade.Milliseconds()
	if err := c.Set(context.Background(), a.co.k.freeze("p"), strconv.FormatInt(far, 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a frozen", 2*time.Second, func() bool { return !a.lim.Stats().Controller.FrozenUntil.IsZero() })
	until := a.lim.Stats().Controller.FrozenUntil
	if limit := time.Now().Add(maxFreeze); until.After(limit) {
		t.Fatalf("frozen until %s by a value in Redis, want at most now + %s", until.Format(time.RFC3339), maxFreeze)
	}
	time.Sleep(5 * fs.Heartbeat)
	if again := a.lim.Stats().Controller.FrozenUntil; again.After(until.Add(signalSlack)) {
		t.Errorf("the same value in Redis froze again: until %s, then %s", until.Format(time.StampMilli), again.Format(time.StampMilli))
	}
	if !strings.Contains(log.String(), "capped") {
		t.Errorf("no warning about the far freeze:\n%s", log)
	}
	if maxFreeze < control.MaxRetryAfter || maxFreeze < settings.MaxCooldown {
		t.Errorf("maxFreeze %s is shorter than a freeze a replica decides", maxFreeze)
	}
}

// A far deadline in the freeze key does not stop a real freeze from being
// published to the fleet.
func TestFreezeScriptIgnoresFarDeadline(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	c := rs.client(t)
	ctx := context.Background()
	now := redisNowMs(t, c)
	if err := c.Set(ctx, "{test}:freeze:p", strconv.FormatInt(now+decade.Milliseconds(), 10), 0).Err(); err != nil {
		t.Fatal(err)
	}
	until := now + 2000
	moved, err := freezeScript.Run(ctx, c, []string{"{test}:freeze:p"}, until, "{test}:signals", "p "+strconv.FormatInt(until, 10)+" a", maxFreeze.Milliseconds()).Int()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := c.Get(ctx, "{test}:freeze:p").Int64()
	if moved != 1 || got != until {
		t.Errorf("freeze script moved=%d, key %d: want the real freeze %d published over the far one", moved, got, until)
	}
}

// Strict leases in Redis that say they expire in ten years hold their
// places for at most 2 × lease_ttl: then the fleet's ceiling is free again.
func TestFarLeaseExpiryIsBounded(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	c := rs.client(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	set := limiterSettings(settings.AlgorithmFixed, settings.FleetStrict, 2)
	a, _ := runLogged(t, rs.client(t), "a", set, fs)
	testutil.Eventually(t, "a coordinated", 5*time.Second, coordinated(a))
	far := float64(redisNowMs(t, c) + decade.Milliseconds())
	if err := c.ZAdd(context.Background(), a.co.k.leases("p"), redis.Z{Score: far, Member: "ghost/1"}, redis.Z{Score: far, Member: "ghost/2"}).Err(); err != nil {
		t.Fatal(err)
	}
	a.co.mu.Lock()
	l := a.co.provs["p"].lease
	a.co.mu.Unlock()
	start := time.Now()
	id, err := l.Acquire(start.Add(2*fs.LeaseTTL+2*time.Second), nil)
	if err != nil {
		t.Fatalf("no lease in %s with two leases in Redis expiring in ten years: %v", time.Since(start), err)
	}
	l.Release(id)
	t.Logf("lease granted after %s", time.Since(start))
}

// A peer that publishes a ceiling far below this replica's (a value no
// rolling change explains) does not cut the fleet to it; it is logged.
func TestFarPeerCeilingIsIgnored(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	c := rs.client(t)
	fs := fleetSettings(100*time.Millisecond, time.Second)
	a, log := runLogged(t, rs.client(t), "a", limiterSettings(settings.AlgorithmFixed, settings.FleetShared, 40), fs)
	testutil.Eventually(t, "a coordinated", 5*time.Second, coordinated(a))
	ctx := context.Background()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the rogue peer keeps its beat and its demand fresh
		defer close(done)
		for {
			now := redisNowMs(t, c)
			_ = c.ZAdd(ctx, a.co.k.replicas(), redis.Z{Score: float64(now), Member: "rogue"}).Err()
			_ = c.HSet(ctx, a.co.k.demand("p"), "rogue", "0 0 1 0").Err()
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-done }()
	testutil.Eventually(t, "the rogue peer seen", 3*time.Second, func() bool { return a.provider().Replicas == 2 })
	time.Sleep(3 * fs.Heartbeat)
	if got := a.provider().Ceiling; got != 40 {
		t.Errorf("fleet ceiling %d with a peer publishing 1, want this replica's 40", got)
	}
	if !strings.Contains(log.String(), "ceiling far from") {
		t.Errorf("no warning about the far ceiling:\n%s", log)
	}
	if n := strings.Count(log.String(), "ceiling far from"); n != 1 {
		t.Errorf("the far ceiling logged %d times, want once a minute", n)
	}
}

// A wrong password is an authentication failure: logged as one, in the
// status, and a replica that never got through is not ready.
func TestWrongRedisPasswordIsAnAuthFailure(t *testing.T) {
	t.Parallel()
	rs := startRedisWith(t, "--requirepass", "right")
	fs := fleetSettings(100*time.Millisecond, time.Second)
	for _, pw := range []string{"wrong", ""} {
		c := newTestClient(rs.addr())
		c.Options().Password = pw
		t.Cleanup(func() { c.Close() })
		a, log := runLogged(t, c, "a-"+pw, limiterSettings(settings.AlgorithmFixed, settings.FleetShared, 40), fs)
		testutil.Eventually(t, "auth failure seen", 3*time.Second, func() bool { return a.co.Status().AuthFailed })
		st := a.co.Status()
		if st.State != StateDegraded || st.NotReady() == "" {
			t.Errorf("password %q: state %s, not ready %q: want degraded and not ready", pw, st.State, st.NotReady())
		}
		if !strings.Contains(log.String(), "level=ERROR") || !strings.Contains(log.String(), "authentication failed") {
			t.Errorf("password %q: not logged as an authentication failure:\n%s", pw, log)
		}
		if strings.Contains(log.String(), "Redis unreachable") {
			t.Errorf("password %q: logged as unreachable:\n%s", pw, log)
		}
		a.stop()
	}
	// The right password: coordinated, ready.
	c := newTestClient(rs.addr())
	c.Options().Password = "right"
	t.Cleanup(func() { c.Close() })
	a, _ := runLogged(t, c, "a-right", limiterSettings(settings.AlgorithmFixed, settings.FleetShared, 40), fs)
	testutil.Eventually(t, "coordinated with the right password", 3*time.Second, coordinated(a))
	if st := a.co.Status(); st.AuthFailed || st.NotReady() != "" {
		t.Errorf("right password: auth failed %v, not ready %q", st.AuthFailed, st.NotReady())
	}
}
