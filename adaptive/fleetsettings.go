package adaptive

import (
	"fmt"
	"time"
)

// FleetSettings are the timings of a fleet coordinator (the config's
// cluster block; adaptive/cluster runs them). This is the one place their
// defaults and ranges are decided; config gets them through the rules the
// proxy hands it. Param names in Problems are the YAML keys of the block.
type FleetSettings struct {
	// Heartbeat is how often a replica publishes its demand and
	// recomputes its share. A replica silent for 3 heartbeats drops out.
	// Default 1s, 100ms..10s. Every replica of a fleet should use the same.
	Heartbeat time.Duration
	// LeaseTTL is how long a strict-mode lease lives without renewal: the
	// longest a crashed replica's permits stay taken. Renewed every
	// heartbeat. Default 10s, 1s..5m, at least 3 heartbeats.
	LeaseTTL time.Duration
	// ExpectedReplicas is the number of replicas assumed while Redis has
	// never been reached (a replica that starts while it is down divides
	// the ceiling by it). Default 2, 1..10000.
	ExpectedReplicas int
}

// Bounds of FleetSettings.
const (
	minHeartbeat    = 100 * time.Millisecond
	maxHeartbeat    = 10 * time.Second
	minLeaseTTL     = time.Second
	maxLeaseTTL     = 5 * time.Minute
	maxFleetSize    = 10000
	leaseHeartbeats = 3 // a lease outlives this many heartbeats
)

// DefaultFleetSettings returns a 1 s heartbeat, 10 s leases and 2
// expected replicas.
func DefaultFleetSettings() FleetSettings {
	return FleetSettings{Heartbeat: time.Second, LeaseTTL: 10 * time.Second, ExpectedReplicas: 2}
}

// Problems lists every invalid fleet setting.
func (f FleetSettings) Problems() []Problem {
	var ps []Problem
	bad := func(param, format string, a ...any) {
		ps = append(ps, Problem{Param: param, Msg: fmt.Sprintf(format, a...)})
	}
	hbOK := f.Heartbeat >= minHeartbeat && f.Heartbeat <= maxHeartbeat
	if !hbOK {
		bad("heartbeat", "must be between %s and %s, got %s", fmtDur(minHeartbeat), fmtDur(maxHeartbeat), fmtDur(f.Heartbeat))
	}
	switch {
	case f.LeaseTTL < minLeaseTTL || f.LeaseTTL > maxLeaseTTL:
		bad("lease_ttl", "must be between %s and %s, got %s", fmtDur(minLeaseTTL), fmtDur(maxLeaseTTL), fmtDur(f.LeaseTTL))
	case hbOK && f.LeaseTTL < leaseHeartbeats*f.Heartbeat:
		bad("lease_ttl", "must be at least %d heartbeats (%s), got %s", leaseHeartbeats, fmtDur(leaseHeartbeats*f.Heartbeat), fmtDur(f.LeaseTTL))
	}
	if f.ExpectedReplicas < 1 || f.ExpectedReplicas > maxFleetSize {
		bad("expected_replicas", "must be between 1 and %d, got %d", maxFleetSize, f.ExpectedReplicas)
	}
	return ps
}
