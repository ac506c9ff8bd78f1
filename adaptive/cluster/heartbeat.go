package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// beatLoop publishes a heartbeat every interval and sends the lease
// releases as they come. Both run on this one goroutine, so a heartbeat
// that re-publishes the leases held can never re-add one whose release was
// already sent.
func (c *Coordinator) beatLoop(ctx context.Context) {
	t := time.NewTicker(c.hb())
	defer t.Stop()
	c.beat(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.beat(ctx)
		case r := <-c.releaseCh:
			c.sendReleases(ctx, r)
		}
	}
}

// beat runs one heartbeat: publish, read, recompute every share, then
// claim them (claim).
func (c *Coordinator) beat(ctx context.Context) {
	c.mu.Lock()
	now := time.Now()
	c.syncProvidersLocked()
	names := c.namesLocked()
	ks := make([]string, 0, 3+perProvider*len(names))
	ks = append(ks, c.k.replicas(), c.k.boot(), c.k.rebuild())
	args := []any{c.o.ReplicaID, (20 * c.hb()).Milliseconds(), (10 * c.hb()).Milliseconds(), c.rebuildWindow().Milliseconds(),
		c.o.Settings.LeaseTTL.Milliseconds(), len(names)}
	for _, name := range names {
		p := c.provs[name]
		ks = append(ks, c.k.demand(name), c.k.leases(name), c.k.freeze(name), c.k.baseline(name), c.k.limit(name))
		dv, own := c.demandLocked(p, now)
		args = append(args, dv, own, formatBaseline(p.lim))
		if p.lease != nil {
			ms := p.lease.members()
			args = append(args, len(ms))
			args = append(args, ms...)
		} else {
			args = append(args, 0)
		}
	}
	c.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, c.opTimeout())
	defer cancel()
	t0 := time.Now()
	res, err := heartbeatScript.Run(cctx, c.rdb, ks, args...).Slice()
	t1 := time.Now()
	if err == nil {
		err = c.apply(cctx, res, names, t0, t1)
	}
	if err == nil {
		err = c.claim(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		c.fail(err)
	}
}

// perProvider is the number of keys, and of answers, per provider in a
// heartbeat: demand, leases, freeze, baseline, limit.
const perProvider = 5

// rebuildWindow is how long no strict lease is granted after Redis lost
// its state: long enough for every replica's next heartbeat to re-publish
// the leases it holds.
func (c *Coordinator) rebuildWindow() time.Duration { return 2*c.hb() + 500*time.Millisecond }

// apply takes in a heartbeat's answer.
func (c *Coordinator) apply(ctx context.Context, res []any, names []string, t0, t1 time.Time) error {
	if len(res) != 3+perProvider*len(names) {
		return fmt.Errorf("cluster: heartbeat answered %d values, want %d", len(res), 3+perProvider*len(names))
	}
	redisNow, _ := res[0].(int64)
	fresh, _ := res[1].(int64)
	mid := t0.Add(t1.Sub(t0) / 2)
	c.offsetMs.Store(redisNow - mid.UnixMilli())

	c.mu.Lock()
	defer c.mu.Unlock()
	wasDegraded := c.degraded.Load()
	if wasDegraded {
		// The outage said nothing about the others: they count as seen
		// now, and drop out only if they stay silent from here on.
		for id := range c.peers {
			c.peers[id] = t1
		}
	}
	zs, _ := res[2].([]any)
	for i := 0; i+1 < len(zs); i += 2 {
		id, _ := zs[i].(string)
		score, err := strconv.ParseFloat(fmt.Sprint(zs[i+1]), 64)
		if id == "" || err != nil {
			continue
		}
		seen := mid.Add(-time.Duration(redisNow-int64(score)) * time.Millisecond)
		if seen.After(c.peers[id]) {
			c.peers[id] = seen
		}
	}
	for id, seen := range c.peers {
		if t1.Sub(seen) > c.deadAfter() {
			delete(c.peers, id)
		}
	}
	c.peers[c.o.ReplicaID] = t1
	for i, name := range names {
		p := c.provs[name]
		if p == nil {
			continue // removed by a reload meanwhile
		}
		r := res[3+perProvider*i:]
		c.shareLocked(p, parseDemand(r[0], r[4]), t1)
		if n, ok := r[1].(int64); ok {
			p.inStore = int(n)
		}
		if s, ok := r[2].(string); ok {
			if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
				c.applyFreezeLocked(p, ms)
			}
		}
		c.seedLocked(p, parseBaselines(r[3]))
	}
	c.lastN = len(c.peers)
	c.lastBeat, c.lastErr = t1, ""
	c.authFailed.Store(false)
	c.beatsOK.Add(1)
	c.degraded.Store(false)
	if fresh == 1 {
		c.stateLost.Add(1)
		c.log.Warn("cluster: Redis had no fleet state (first start or restart); rebuilt from heartbeats", "replica", c.o.ReplicaID)
	}
	if wasDegraded {
		c.log.Info("cluster: Redis reachable again; coordination resumed", "replicas", len(c.peers))
		// Leases that expired in Redis during the outage are being
		// re-published by every replica's next heartbeat: grant none
		// until then.
		if err := c.rdb.Set(ctx, c.k.rebuild(), 1, c.rebuildWindow()).Err(); err != nil {
			c.log.Warn("cluster: opening the lease rebuild window failed", "error", err.Error())
		}
	}
	return nil
}

// claim sends the claims the heartbeat prepared (shareLocked) in one
// script, which grants each no more than the other live replicas leave of
// the ceiling at that instant and records it in the same step: two
// replicas claiming at once are served one after the other, and the
// second counts what the first just claimed. The record never says less
// than the replica may use: its permits in use now, and the claim in
// force until the answer (held) if that is higher than the grant.
func (c *Coordinator) claim(ctx context.Context) error {
	c.mu.Lock()
	var ps []*provider
	ks := []string{c.k.replicas()}
	args := []any{c.o.ReplicaID, c.deadAfter().Milliseconds(), 0}
	for _, name := range c.namesLocked() {
		p := c.provs[name]
		if !p.claiming {
			continue
		}
		// In flight now, not as the heartbeat published it: permits
		// admitted since, under the cap then in force, are still in use,
		// and the cap may have just been lowered below them. From here
		// on in flight stays under the most of this count and the claim
		// recorded. The demand stays what the heartbeat published.
		pub := p.peers[c.o.ReplicaID]
		in, _, _ := p.lim.FleetDemand()
		ps = append(ps, p)
		ks = append(ks, c.k.demand(name))
		args = append(args, in, max(0, pub.want()-in), pub.ceiling, p.ask, p.held, p.fleetCeil)
	}
	args[2] = len(ps)
	c.mu.Unlock()
	if len(ps) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.opTimeout())
	defer cancel()
	res, err := claimScript.Run(ctx, c.rdb, ks, args...).Slice()
	if err != nil {
		return err
	}
	if len(res) != len(ps) {
		return fmt.Errorf("cluster: claim answered %d values, want %d", len(res), len(ps))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range ps {
		g, _ := res[i].(int64)
		if c.provs[p.name] == p {
			c.claimLocked(p, int(g))
		}
	}
	return nil
}

// parseDemand reads a demand hash (flat: id, "inflight waiting ceiling
// claim") and a limit hash (flat: id, "limit"). A replica without a limit
// (one of a version before it) is taken to use all it asks for.
func parseDemand(dv, lv any) map[string]demand {
	out := map[string]demand{}
	eachFlatField(dv, 4, func(id string, f []string) {
		var n [4]int
		for j := range n {
			x, err := strconv.Atoi(f[j])
			if err != nil || x < 0 {
				return
			}
			n[j] = x
		}
		out[id] = demand{id: id, inflight: n[0], waiting: n[1], ceiling: n[2], cap: n[3], own: -1}
	})
	eachFlatField(lv, 1, func(id string, f []string) {
		d, ok := out[id]
		if x, err := strconv.Atoi(f[0]); ok && err == nil && x >= 0 {
			d.own = x
			out[id] = d
		}
	})
	return out
}

// eachFlatField walks a Redis hash read flat (id, value, id, value, ...)
// and calls fn with each id and its value split into fields, skipping
// entries without an id or with other than fields fields.
func eachFlatField(v any, fields int, fn func(id string, f []string)) {
	flat, _ := v.([]any)
	for i := 0; i+1 < len(flat); i += 2 {
		id, _ := flat[i].(string)
		val, _ := flat[i+1].(string)
		if f := strings.Fields(val); id != "" && len(f) == fields {
			fn(id, f)
		}
	}
}

// fail makes the replica degraded: every provider capped at ceiling /
// (replicas last seen) until a heartbeat gets through. A refusal of
// Sluice's credentials is logged as such, at error: it is a configuration
// to fix, not an outage that ends by itself.
func (c *Coordinator) fail(err error) {
	c.beatsFailed.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err.Error()
	auth := isAuthError(err)
	if auth && !c.authFailed.Swap(true) {
		c.log.Error("cluster: Redis refused Sluice's credentials (cluster.password_env, or the user in cluster.redis): authentication failed; degraded: each provider capped at ceiling / replicas last seen",
			"error", err.Error())
	}
	if !auth {
		c.authFailed.Store(false)
	}
	if !c.degraded.Swap(true) && !auth {
		c.log.Warn("cluster: Redis unreachable; degraded: each provider capped at ceiling / replicas last seen", "error", err.Error())
	}
	for _, p := range c.provs {
		c.capDegradedLocked(p)
	}
}

// degrade is fail for an error seen on the request path (a lease request).
func (c *Coordinator) degrade(err error) {
	if !c.degraded.Load() {
		c.fail(err)
	}
}

// isAuthError reports whether Redis refused the connection's credentials:
// a wrong or missing password (WRONGPASS, NOAUTH), a password sent to a
// Redis that has none, or a user not allowed the commands Sluice runs
// (NOPERM).
func isAuthError(err error) bool {
	if redis.IsAuthError(err) || redis.IsPermissionError(err) {
		return true
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "ERR AUTH") || strings.Contains(msg, "without any password configured")
}
