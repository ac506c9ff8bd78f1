// Package cluster coordinates the limits of a fleet of Sluice replicas
// through Redis: enforce locally, coordinate asynchronously.
//
// Every heartbeat (about once a second) each replica publishes its demand
// per provider (permits in use, requests queued, and how many its own
// controller lets it use) and reads everybody else's; from the live
// replicas' demand it derives its share of the provider's ceiling (every
// waiting request counts alike, wherever it waits; share.go). It then
// claims the share in a second script, which grants no more than the
// other replicas leave of the ceiling at that instant and records the
// claim in the same step, and caps its limiter with the claim
// (adaptive.Limiter.SetFleetCap), so that its effective limit is
// min(learned limit, ceiling, claim). Nothing of this is on the request
// path. A replica silent for three heartbeats drops out and its share
// returns to the others; a replica that stops cleanly leaves at once.
//
// Providers in strict mode (settings.FleetStrict) also take one lease per
// request from a sorted set scored by expiry (Lua scripts, Redis time), so
// the fleet never has more than the ceiling in flight. Leases are renewed
// with every heartbeat and expire LeaseTTL after a replica dies.
//
// A Retry-After or a loss cut seen by one replica freezes growth on all
// of them until the same time (pub/sub, and a key read at every heartbeat
// for replicas that missed the message).
//
// The heartbeat also carries the TTFT baseline each controller learned; a
// replica whose controller is cold seeds it with the live replicas' median
// (baseline.go). Each provider's own rate limits (rate: rpm, tpm, ...)
// hold fleet-wide: one token bucket per dimension in Redis, from which
// every replica leases tokens in batches into local pools that its
// requests reserve from, synced every tenth of a heartbeat (rates.go).
//
// When Redis cannot be reached the replica is degraded: it keeps serving,
// each provider capped at ceiling / (replicas last seen) and its rate
// limits at limit / (replicas last seen), never the whole of either in a
// fleet, and coordination resumes by itself at the first
// heartbeat that gets through. When Redis lost its state (a restart), the
// next heartbeats rebuild it; strict leases are not granted until every
// replica had a heartbeat to re-publish the leases it holds.
//
// The package imports go-redis but neither fasthttp, OpenTelemetry nor
// config: cmd/sluice builds the client from the config and wires the
// coordinator to the proxy's limiters.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/settings"
)

// Options configure a Coordinator.
type Options struct {
	// Client reaches Redis. Required. The Coordinator does not close it.
	// Its timeouts bound how long a heartbeat, and a strict-mode lease
	// request, may wait for an unreachable Redis.
	Client *redis.Client
	// ReplicaID names this replica in the fleet; unique. Required.
	ReplicaID string
	// KeyPrefix starts every key (in a hash tag: "{sluice}:..."). Required.
	KeyPrefix string
	// Settings are the heartbeat, lease TTL and expected fleet size.
	Settings settings.Fleet
	// Limiters returns the limiters of the providers in force, by name
	// (adaptive.Registry.Limiters). Read at every heartbeat, so providers
	// added, removed or switched to strict mode by a reload are followed.
	Limiters func() map[string]*adaptive.Limiter
	// Rates returns the rate layers of the providers in force, by name
	// (adaptive.Registry.Rates). Optional: when set, each provider's own
	// rate limits (rate: rpm, tpm, ...) hold fleet-wide (rates.go). Read at
	// every sync, so reloads are followed.
	Rates func() map[string]*adaptive.Rates
	// Logger receives state changes (degraded, resumed, state lost); nil
	// discards them.
	Logger *slog.Logger
}

// Coordinator runs one replica's part of the fleet. Create it with New,
// run it with Run; Status is safe to call at any time.
type Coordinator struct {
	o     Options
	rdb   *redis.Client
	k     keys
	nonce string // this process: lease ids of a restarted replica never collide
	log   *slog.Logger

	mu        sync.Mutex
	provs     map[string]*provider
	peers     map[string]time.Time // replica id -> last beat, in local time
	lastN     int                  // live replicas at the last good heartbeat; 0 = never
	lastBeat  time.Time
	lastErr   string
	degraded  atomic.Bool
	started   atomic.Bool
	offsetMs  atomic.Int64 // Redis time - local time, ms
	releaseCh chan release

	// authFailed: the last heartbeat failed because Redis refused the
	// credentials (isAuthError).
	authFailed atomic.Bool

	// Fleet-wide rate limits (rates.go); the sync loop's own, then
	// leave's.
	rateWake    chan struct{}
	ratePending *rateBatch
	rateSeq     int64

	rateSyncs, rateFailures         atomic.Uint64
	beatsOK, beatsFailed, stateLost atomic.Uint64
}

// New checks o and returns a Coordinator; nothing is contacted before Run.
func New(o Options) (*Coordinator, error) {
	var errs []error
	if o.Client == nil {
		errs = append(errs, errors.New("cluster: no Redis client"))
	}
	if o.ReplicaID == "" {
		errs = append(errs, errors.New("cluster: empty replica id"))
	}
	if o.KeyPrefix == "" {
		errs = append(errs, errors.New("cluster: empty key prefix"))
	}
	if o.Limiters == nil {
		errs = append(errs, errors.New("cluster: no limiter source"))
	}
	for _, p := range o.Settings.Problems() {
		errs = append(errs, errors.New("cluster: "+p.String()))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	c := &Coordinator{
		o: o, rdb: o.Client, k: newKeys(o.KeyPrefix), nonce: hex.EncodeToString(b[:]), log: o.Logger,
		provs: make(map[string]*provider), peers: make(map[string]time.Time),
		releaseCh: make(chan release, 4096), rateWake: make(chan struct{}, 1),
	}
	return c, nil
}

// Attach caps every provider's limiter for the time before the first
// heartbeat (ceiling / expected replicas) and installs the strict-mode
// leasers, and joins the providers' own rate limits to the fleet (local at
// limit / expected replicas until the first sync). Run calls it; call it
// earlier to cap the limiters before the proxy starts serving.
func (c *Coordinator) Attach() {
	c.mu.Lock()
	c.syncProvidersLocked()
	c.mu.Unlock()
	if c.o.Rates != nil {
		c.fleetRates(rateSyncOf(c.hb()), c.replicasForRates())
	}
}

// Run coordinates until ctx is cancelled, then hands back the leases
// still queued for release and leaves the fleet (so the others take this
// replica's share at once), and returns when every goroutine it started
// has stopped. Call it once.
func (c *Coordinator) Run(ctx context.Context) {
	if !c.started.CompareAndSwap(false, true) {
		panic("cluster: Run called twice")
	}
	c.Attach()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.signalLoop(ctx) }()
	go func() { defer wg.Done(); c.subscribe(ctx) }()
	go func() { defer wg.Done(); c.rateLoop(ctx) }()
	c.beatLoop(ctx)
	wg.Wait()
	c.leave()
}

// hb is the heartbeat interval.
func (c *Coordinator) hb() time.Duration { return c.o.Settings.Heartbeat }

// deadAfter is how long a replica may be silent before it drops out.
func (c *Coordinator) deadAfter() time.Duration { return 3 * c.hb() }

// opTimeout bounds one call to Redis from a background loop.
func (c *Coordinator) opTimeout() time.Duration { return max(c.hb(), time.Second) }

// leave removes this replica from the fleet: pending releases first, then
// its beat and its demand. Best effort, bounded by one heartbeat.
func (c *Coordinator) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), c.opTimeout())
	defer cancel()
	c.drainReleases(ctx)
	c.mu.Lock()
	ks := []string{c.k.replicas()}
	for name := range c.provs {
		ks = append(ks, c.k.demand(name))
	}
	c.mu.Unlock()
	if c.degraded.Load() {
		return
	}
	c.returnRates(ctx)
	if err := leaveScript.Run(ctx, c.rdb, ks, c.o.ReplicaID, c.k.signals(), leaveMsg+" "+c.o.ReplicaID).Err(); err != nil {
		c.log.Warn("cluster: leaving the fleet failed; the others drop this replica after three heartbeats", "error", err.Error())
	}
}
