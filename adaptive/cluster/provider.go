package cluster

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/settings"
)

// provider is the coordinator's view of one provider. Guarded by
// Coordinator.mu.
type provider struct {
	name    string
	lim     *adaptive.Limiter
	strict  bool
	lease   *leaser // kept once created, so leases taken before a switch back to shared mode are still renewed
	ceiling int     // this replica's configured ceiling

	// From the last good heartbeat.
	fleetCeil     int // the lowest ceiling of the live replicas
	replicas      int // live replicas serving this provider; 0 = never seen
	share, cap    int // cap: what the limiter is capped at (SetFleetCap)
	fleetInflight int
	fleetWant     int
	inStore       int // strict leases in Redis
	peers         map[string]demand

	// The claim (share.go): what this replica told the others it may
	// admit up to, and so what they count as used. cap is the claim, or
	// the limiter's minimum of one permit when the claim is 0.
	claim int
	// A claim under way, between the heartbeat's answer and claimScript's:
	// the share it asks for, the claim in force meanwhile (held: never
	// more than the one published), and the room the heartbeat's view
	// left.
	ask, held, room int
	claiming        bool
	// Demand: the most this replica could use, sampled every signal scan
	// since the last heartbeat, and when it last had demand or a share of
	// the fleet's slack (holdFor).
	peak     int
	lastHeld time.Time

	// Shared TTFT baseline (baseline.go).
	fleetBaseline time.Duration // median of the other live replicas' baselines; 0 = none published
	baselines     int           // live replicas other than this one that published one
	seeded        uint64        // times this replica's cold controller was seeded

	// Signals.
	scanned      bool
	lastDrop     time.Time
	lastLoss     float64
	knownFreeze  time.Time // the latest fleet freeze sent or applied
	signalsSent  uint64
	signalsRecvd uint64

	// remoteFreezeMs is the last freeze deadline read from Redis (Redis
	// time, ms), applied once.
	remoteFreezeMs int64
	// farWarned is when a peer's ceiling far from this replica's was last
	// logged.
	farWarned time.Time
}

// syncProvidersLocked follows the config in force: new providers are
// capped at once (ceiling / expected or last seen replicas) until the next
// heartbeat gives them a share, strict ones get a leaser, removed ones are
// forgotten.
func (c *Coordinator) syncProvidersLocked() {
	lims := c.o.Limiters()
	for name, lim := range lims {
		p := c.provs[name]
		if p == nil || p.lim != lim {
			p = &provider{name: name, lim: lim, peers: make(map[string]demand)}
			c.provs[name] = p
		}
		set := lim.Stats().Settings
		p.ceiling = set.Limit.Ceiling
		if p.fleetCeil == 0 || p.replicas == 0 {
			p.fleetCeil = p.ceiling
		}
		p.strict = set.Limit.Fleet == settings.FleetStrict
		switch {
		case p.strict && p.lease == nil:
			p.lease = newLeaser(c, name, p.fleetCeil)
			lim.SetLeaser(p.lease)
		case p.strict && !lim.Leasing():
			lim.SetLeaser(p.lease)
		case !p.strict && lim.Leasing():
			lim.SetLeaser(nil)
		}
		if p.cap == 0 || c.degraded.Load() {
			c.capDegradedLocked(p)
		}
	}
	for name, p := range c.provs {
		if lims[name] != p.lim {
			delete(c.provs, name)
		}
	}
}

// capDegradedLocked caps p as a replica that cannot see the fleet: an
// equal part of the ceiling for each replica last seen (the expected
// number when none was ever seen).
func (c *Coordinator) capDegradedLocked(p *provider) {
	n := p.replicas
	if n == 0 {
		n = c.o.Settings.ExpectedReplicas
	}
	p.cap = degradedCap(p.ceiling, n)
	p.share, p.claim, p.claiming = p.cap, p.cap, false
	p.lim.SetFleetCap(p.cap)
}

// farWarnEvery spaces the warnings about a peer's far ceiling: it is read
// at every heartbeat.
const farWarnEvery = time.Minute

// names returns the providers' names, sorted: the order of the
// heartbeat's keys.
func (c *Coordinator) namesLocked() []string {
	names := make([]string, 0, len(c.provs))
	for name := range c.provs {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// demandLocked is what this replica publishes for p at a heartbeat: its
// demand, "inflight waiting ceiling claim", and its own limit (the most
// of the ceiling its controller lets it use; adaptive.Limiter.FleetDemand).
// Demand is the most it had at any scan since the last heartbeat (a
// replica whose clients come and go between heartbeats is not seen as
// idle), or one permit while it had demand or a share of slack within
// holdFor.
func (c *Coordinator) demandLocked(p *provider, now time.Time) (dv, own string) {
	in, w, lim := p.lim.FleetDemand()
	want := max(p.peak, in+w)
	p.peak = 0
	switch {
	case want > 0:
		p.lastHeld = now
	case !p.lastHeld.IsZero() && now.Sub(p.lastHeld) <= holdFor(c.hb()):
		want = 1
	}
	return fmt.Sprintf("%d %d %d %d", in, max(0, want-in), p.ceiling, p.claim), strconv.Itoa(lim)
}

// sampleDemand notes each provider's demand between heartbeats.
func (c *Coordinator) sampleDemand() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.provs {
		in, w, _ := p.lim.FleetDemand()
		p.peak = max(p.peak, in+w)
	}
}

// shareLocked recomputes p's share from the demand of the live replicas
// (the hash just read, and the last known demand of live replicas the
// hash lost, e.g. after a Redis restart) and prepares the claim that
// claimLocked completes: a share below the claim in force lowers the cap
// at once (that is always safe); a higher one waits for claimScript.
func (c *Coordinator) shareLocked(p *provider, fields map[string]demand, now time.Time) {
	for id, d := range fields {
		if _, live := c.peers[id]; live {
			p.peers[id] = d
		}
	}
	ds := make([]demand, 0, len(p.peers))
	for id, d := range p.peers {
		if _, live := c.peers[id]; !live {
			delete(p.peers, id)
			continue
		}
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].id < ds[j].id })
	self := -1
	p.fleetInflight, p.fleetWant = 0, 0
	for i, d := range ds {
		if d.id == c.o.ReplicaID {
			self = i
		}
		p.fleetInflight += d.inflight
		p.fleetWant += d.want()
	}
	if self < 0 { // unreachable: this replica's demand was just written
		return
	}
	var far *demand
	p.fleetCeil, far = fleetCeiling(p.ceiling, ds)
	if far != nil && (p.farWarned.IsZero() || now.Sub(p.farWarned) >= farWarnEvery) {
		p.farWarned = now
		c.log.Warn("cluster: a replica publishes a ceiling far from this one's; ignored (change a ceiling in steps of at most 4x)",
			"provider", p.name, "replica", far.id, "its_ceiling", far.ceiling, "ceiling", p.ceiling)
	}
	shares := allocate(p.fleetCeil, ds)
	ask := shares[self]
	if p.replicas == 0 {
		ask = min(ask, firstClaim(p.fleetCeil, c.o.Settings.ExpectedReplicas, ds, self))
	}
	if slack(p.fleetCeil, ds) {
		p.lastHeld = now
	}
	p.replicas, p.share = len(ds), shares[self]
	p.ask, p.held, p.room, p.claiming = max(0, ask), max(0, min(p.claim, ask)), headroom(p.fleetCeil, ds, self), true
	if lower := max(1, p.held); lower < p.cap {
		p.cap = lower
		p.lim.SetFleetCap(lower)
	}
	if p.lease != nil {
		p.lease.ceil.Store(int64(p.fleetCeil))
	}
}

// claimLocked completes p's claim with what claimScript granted: no more
// than the share, than the others left in Redis when it ran, and than
// they left in the heartbeat's view (which also counts replicas that
// Redis lost after a restart). The cap is the claim, at least one permit.
func (c *Coordinator) claimLocked(p *provider, granted int) {
	if !p.claiming {
		return
	}
	p.claiming = false
	p.claim = max(0, min(granted, p.ask, p.room))
	p.cap = max(1, p.claim)
	p.lim.SetFleetCap(p.cap)
}
