package cluster

import (
	"sort"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/settings"
)

// States of a replica in Status.State.
const (
	StateStarting    = "starting"    // no heartbeat answered yet
	StateCoordinated = "coordinated" // the last heartbeat got through
	StateDegraded    = "degraded"    // Redis unreachable: capped at ceiling / replicas last seen
)

// Status is one replica's view of the fleet, for /admin/status and
// metrics.
type Status struct {
	ReplicaID string `json:"replica_id"`
	State     string `json:"state"`
	// Replicas is the number of live replicas at the last good heartbeat,
	// this one included (0 before the first).
	Replicas          int       `json:"replicas"`
	LastHeartbeat     time.Time `json:"last_heartbeat"`
	LastError         string    `json:"last_error,omitempty"`
	Heartbeats        uint64    `json:"heartbeats"`
	HeartbeatFailures uint64    `json:"heartbeat_failures"`
	StateLost         uint64    `json:"state_lost"` // heartbeats that found Redis without the fleet's state
	// AuthFailed: the last heartbeat failed because Redis refused the
	// credentials (a wrong password, or a user without the commands
	// Sluice runs); the replica is degraded meanwhile.
	AuthFailed bool `json:"auth_failed,omitempty"`
	// RateSyncs and RateSyncFailures count the syncs of fleet-wide rate
	// limits with Redis.
	RateSyncs        uint64           `json:"rate_syncs"`
	RateSyncFailures uint64           `json:"rate_sync_failures"`
	Providers        []ProviderStatus `json:"providers"`
}

// NotReady says why the replica should not take traffic, or "" when it
// may: Redis refused its credentials and no heartbeat got through since it
// started, so a replica started with a wrong password stays out of the
// load balancer (and a rolling change that brings one stops) instead of
// serving uncoordinated. A replica that was coordinated stays ready when
// its credentials are refused later, degraded as in any Redis outage: a
// password changed in Redis alone does not take the whole fleet out.
func (s Status) NotReady() string {
	if s.AuthFailed && s.Heartbeats == 0 {
		return "cluster: Redis refused the credentials (authentication failed)"
	}
	return ""
}

// ProviderStatus is one provider's part of Status.
type ProviderStatus struct {
	Name string `json:"name"`
	Mode string `json:"mode"` // settings.FleetShared or settings.FleetStrict
	// Ceiling is the fleet's ceiling: the lowest of the live replicas'.
	Ceiling int `json:"ceiling"`
	// Share is this replica's share of it from the fleet's demand; Cap
	// what the limiter is capped at: its claim on the share (less while
	// others still use permits they are giving back; at least one
	// permit), or ceiling / replicas when degraded.
	Share    int `json:"share"`
	Cap      int `json:"cap"`
	Replicas int `json:"replicas"`
	// FleetInflight and FleetDemand (in flight + queued) are summed over
	// the live replicas at the last heartbeat.
	FleetInflight int        `json:"fleet_inflight"`
	FleetDemand   int        `json:"fleet_demand"`
	FrozenUntil   *time.Time `json:"frozen_until,omitempty"` // the latest fleet freeze, while it lasts
	// FleetBaselineSeconds is the median learned TTFT baseline of the
	// other live replicas (0: none published), from BaselineReplicas of
	// them; BaselineSeeded counts the times this replica's cold
	// controller started from it.
	FleetBaselineSeconds float64      `json:"fleet_baseline_seconds"`
	BaselineReplicas     int          `json:"baseline_replicas"`
	BaselineSeeded       uint64       `json:"baseline_seeded"`
	SignalsSent          uint64       `json:"signals_sent"`
	SignalsReceived      uint64       `json:"signals_received"`
	Leases               *LeaseStatus `json:"leases,omitempty"` // strict mode
	// Rate is the provider's fleet-wide rate limit on this replica, when
	// its rate: block limits something.
	Rate *RateStatus `json:"rate,omitempty"`
}

// LeaseStatus counts one strict provider's leases.
type LeaseStatus struct {
	Held    int `json:"held"`     // by this replica now
	InStore int `json:"in_store"` // in Redis at the last heartbeat, the whole fleet's
	// Granted leases, Unconfirmed included; Waited requests found the
	// fleet full first; Unconfirmed were granted while degraded, without
	// Redis (published by the next heartbeat that gets through).
	Granted     uint64 `json:"granted"`
	Waited      uint64 `json:"waited"`
	Unconfirmed uint64 `json:"unconfirmed"`
	// Timeouts and Canceled requests got none.
	Timeouts uint64 `json:"timeouts"`
	Canceled uint64 `json:"canceled"`
	// ReleaseDropped leases could not be released and expire by their TTL.
	ReleaseDropped      uint64  `json:"release_dropped"`
	AcquireSecondsTotal float64 `json:"acquire_seconds_total"`
}

// Status returns this replica's view of the fleet.
func (c *Coordinator) Status() Status {
	var rates map[string]*adaptive.Rates
	if c.o.Rates != nil {
		rates = c.o.Rates()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{
		RateSyncs: c.rateSyncs.Load(), RateSyncFailures: c.rateFailures.Load(),
		ReplicaID: c.o.ReplicaID, Replicas: c.lastN, LastHeartbeat: c.lastBeat, LastError: c.lastErr,
		Heartbeats: c.beatsOK.Load(), HeartbeatFailures: c.beatsFailed.Load(), StateLost: c.stateLost.Load(),
		AuthFailed: c.authFailed.Load(),
	}
	switch {
	case c.degraded.Load():
		s.State = StateDegraded
	case c.lastBeat.IsZero():
		s.State = StateStarting
	default:
		s.State = StateCoordinated
	}
	now := time.Now()
	for _, name := range c.namesLocked() {
		p := c.provs[name]
		ps := ProviderStatus{
			Name: name, Mode: settings.FleetShared, Ceiling: p.fleetCeil, Share: p.share, Cap: p.cap, Replicas: p.replicas,
			FleetInflight: p.fleetInflight, FleetDemand: p.fleetWant, SignalsSent: p.signalsSent, SignalsReceived: p.signalsRecvd,
			FleetBaselineSeconds: p.fleetBaseline.Seconds(), BaselineReplicas: p.baselines, BaselineSeeded: p.seeded,
		}
		if p.strict {
			ps.Mode = settings.FleetStrict
		}
		if p.knownFreeze.After(now) {
			t := p.knownFreeze
			ps.FrozenUntil = &t
		}
		if r := rates[name]; r != nil {
			ps.Rate = rateStatus(r)
		}
		if l := p.lease; l != nil {
			ps.Leases = &LeaseStatus{
				Held: l.heldCount(), InStore: p.inStore, Granted: l.granted.Load(), Waited: l.waited.Load(),
				Unconfirmed: l.unconfirmed.Load(), Timeouts: l.timeouts.Load(), Canceled: l.canceled.Load(),
				ReleaseDropped: l.dropped.Load(), AcquireSecondsTotal: time.Duration(l.acquireNs.Load()).Seconds(),
			}
		}
		s.Providers = append(s.Providers, ps)
	}
	sort.Slice(s.Providers, func(i, j int) bool { return s.Providers[i].Name < s.Providers[j].Name })
	return s
}
