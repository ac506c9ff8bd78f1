package settings

import "time"

// Fleet is the timings of a fleet coordinator: the heartbeat, lease_ttl
// and expected_replicas keys of the cluster block, whose connection keys
// the config package keeps beside them. Every replica of a fleet should
// use the same.
type Fleet struct {
	// Heartbeat is how often a replica publishes its demand and
	// recomputes its share. A replica silent for 3 heartbeats drops out.
	// Default 1s, 100ms..10s.
	Heartbeat time.Duration `yaml:"heartbeat"`
	// LeaseTTL is how long a strict-mode lease lives without renewal: the
	// longest a crashed replica's permits stay taken. Renewed every
	// heartbeat. Default 10s, 1s..5m, at least 3 heartbeats.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// ExpectedReplicas is the number of replicas assumed while Redis has
	// never been reached (a replica that starts while it is down divides
	// the ceiling by it). Default 2, 1..10000.
	ExpectedReplicas int `yaml:"expected_replicas"`
}

// Bounds of the fleet settings.
const (
	minHeartbeat    = 100 * time.Millisecond
	maxHeartbeat    = 10 * time.Second
	minLeaseTTL     = time.Second
	maxLeaseTTL     = 5 * time.Minute
	maxFleetSize    = 10000
	leaseHeartbeats = 3 // a lease outlives this many heartbeats
)

// DefaultFleet returns a 1s heartbeat, 10s leases and 2 expected
// replicas.
func DefaultFleet() Fleet {
	return Fleet{Heartbeat: time.Second, LeaseTTL: 10 * time.Second, ExpectedReplicas: 2}
}

// Problems lists every invalid fleet setting; Key is the key inside the
// cluster block.
func (f Fleet) Problems() []Problem {
	var ps problems
	hbOK := f.Heartbeat >= minHeartbeat && f.Heartbeat <= maxHeartbeat
	if !hbOK {
		ps.bad("heartbeat", "must be between %s and %s, got %s", FormatDuration(minHeartbeat), FormatDuration(maxHeartbeat), FormatDuration(f.Heartbeat))
	}
	switch {
	case f.LeaseTTL < minLeaseTTL || f.LeaseTTL > maxLeaseTTL:
		ps.bad("lease_ttl", "must be between %s and %s, got %s", FormatDuration(minLeaseTTL), FormatDuration(maxLeaseTTL), FormatDuration(f.LeaseTTL))
	case hbOK && f.LeaseTTL < leaseHeartbeats*f.Heartbeat:
		ps.bad("lease_ttl", "must be at least %d heartbeats (%s), got %s", leaseHeartbeats, FormatDuration(leaseHeartbeats*f.Heartbeat), FormatDuration(f.LeaseTTL))
	}
	if f.ExpectedReplicas < 1 || f.ExpectedReplicas > maxFleetSize {
		ps.bad("expected_replicas", "must be between 1 and %d, got %d", maxFleetSize, f.ExpectedReplicas)
	}
	return ps
}
