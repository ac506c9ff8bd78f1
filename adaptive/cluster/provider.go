package cluster

import (
	"sort"
	"time"

	"github.com/sluicehq/sluice/adaptive"
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
	share, cap    int
	fleetInflight int
	fleetWant     int
	inStore       int // strict leases in Redis
	peers         map[string]demand

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
		p.strict = set.Limit.Fleet == adaptive.FleetStrict
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
	p.share = p.cap
	p.lim.SetFleetCap(p.cap)
}

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

// shareLocked recomputes p's share from the demand of the live replicas
// (the hash just read, and the last known demand of live replicas the
// hash lost, e.g. after a Redis restart) and caps the limiter with it.
func (c *Coordinator) shareLocked(p *provider, fields map[string]demand) {
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
	p.fleetCeil = fleetCeiling(p.ceiling, ds)
	shares := allocate(p.fleetCeil, ds)
	p.replicas, p.share = len(ds), shares[self]
	p.cap = capOf(p.fleetCeil, ds, shares, self)
	p.lim.SetFleetCap(p.cap)
	if p.lease != nil {
		p.lease.ceil.Store(int64(p.fleetCeil))
	}
}
