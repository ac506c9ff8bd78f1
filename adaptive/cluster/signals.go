package cluster

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/settings"
)

const (
	signalScan  = 25 * time.Millisecond // how often local freezes and cuts are looked for
	signalSlack = 50 * time.Millisecond // freezes closer than this are the same freeze
)

type freezeSignal struct {
	name  string
	until time.Time
}

// signalLoop looks for local freezes and cuts and tells the fleet. It
// also samples each provider's demand for the next heartbeat
// (sampleDemand).
func (c *Coordinator) signalLoop(ctx context.Context) {
	t := time.NewTicker(signalScan)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.sampleDemand()
			c.publish(ctx, c.scanSignals(time.Now()))
		}
	}
}

// scanSignals returns the freezes this replica's controllers decided since
// the last scan: a Retry-After (growth frozen until then), or a loss cut
// (the others hold their limit for the cut's cool-down).
func (c *Coordinator) scanSignals(now time.Time) []freezeSignal {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []freezeSignal
	for _, p := range c.provs {
		st := p.lim.Stats()
		cs := st.Controller
		if !p.scanned {
			p.scanned, p.lastDrop, p.lastLoss = true, cs.LastDrop, cs.Loss
			continue
		}
		var until time.Time
		if cs.FrozenUntil.After(p.knownFreeze.Add(signalSlack)) {
			until = cs.FrozenUntil
		}
		if cs.LastDrop.After(p.lastDrop) && cs.Loss < p.lastLoss {
			if cut := cs.LastDrop.Add(st.Settings.Limit.Cooldown); cut.After(now) && cut.After(until) && cut.After(p.knownFreeze.Add(signalSlack)) {
				until = cut
			}
		}
		p.lastDrop, p.lastLoss = cs.LastDrop, cs.Loss
		if !until.IsZero() {
			p.knownFreeze = until
			p.signalsSent++
			out = append(out, freezeSignal{p.name, until})
		}
	}
	return out
}

// publish raises each provider's fleet freeze in Redis and announces it.
// While degraded, nothing is sent: the freeze stays local.
func (c *Coordinator) publish(ctx context.Context, sigs []freezeSignal) {
	if len(sigs) == 0 || c.degraded.Load() {
		return
	}
	off := c.offsetMs.Load()
	for _, s := range sigs {
		untilMs := s.until.UnixMilli() + off
		msg := s.name + " " + strconv.FormatInt(untilMs, 10) + " " + c.o.ReplicaID
		cctx, cancel := context.WithTimeout(ctx, c.opTimeout())
		err := freezeScript.Run(cctx, c.rdb, []string{c.k.freeze(s.name)}, untilMs, c.k.signals(), msg, maxFreeze.Milliseconds()).Err()
		cancel()
		if err != nil && ctx.Err() == nil {
			c.log.Warn("cluster: publishing a freeze failed; it stays local", "provider", s.name, "error", err.Error())
		}
	}
}

// subscribe applies the freezes other replicas announce.
func (c *Coordinator) subscribe(ctx context.Context) {
	ps := c.rdb.Subscribe(ctx, c.k.signals())
	defer ps.Close()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			c.onSignal(m.Payload)
		}
	}
}

// leaveMsg starts the message of a replica that leaves ("-leave id");
// provider names cannot start with "-".
const leaveMsg = "-leave"

// onSignal applies "provider until_ms replica" from another replica, or
// forgets a replica that left ("-leave id").
func (c *Coordinator) onSignal(payload string) {
	f := strings.Fields(payload)
	if len(f) == 2 && f[0] == leaveMsg && f[1] != c.o.ReplicaID {
		c.mu.Lock()
		delete(c.peers, f[1])
		c.mu.Unlock()
		return
	}
	if len(f) != 3 || f[2] == c.o.ReplicaID {
		return
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.provs[f[0]]; p != nil {
		c.applyFreezeLocked(p, ms)
	}
}

// maxFreeze bounds a freeze read from Redis: no replica decides a longer
// one (a Retry-After is capped at control.MaxRetryAfter, a loss cut holds
// for at most the longest cool-down), so a later deadline is a value
// nobody published and is cut to what a local freeze could be.
const maxFreeze = max(control.MaxRetryAfter, settings.MaxCooldown)

// applyFreezeLocked freezes p's growth until untilMs (Redis time) unless a
// freeze at least as long is known already. The deadline is capped at
// now + maxFreeze, and a deadline already applied is not applied again
// (the freeze key is read at every heartbeat), so a far-off value in
// Redis freezes for the cap once, not forever.
func (c *Coordinator) applyFreezeLocked(p *provider, untilMs int64) {
	if untilMs == p.remoteFreezeMs {
		return
	}
	p.remoteFreezeMs = untilMs
	now := time.Now()
	until := time.UnixMilli(untilMs - c.offsetMs.Load())
	if limit := now.Add(maxFreeze); until.After(limit) {
		c.log.Warn("cluster: a fleet freeze read from Redis is beyond the longest a replica decides; capped",
			"provider", p.name, "until", until.UTC().Format(time.RFC3339), "cap", maxFreeze.String())
		until = limit
	}
	if !until.After(now) || !until.After(p.knownFreeze.Add(signalSlack)) {
		return
	}
	p.knownFreeze = until
	p.signalsRecvd++
	p.lim.FreezeGrowth(until)
}
