package cluster

// keys names everything the fleet keeps in Redis. Every key starts with
// the prefix in braces, a Redis Cluster hash tag: all of a fleet's keys
// live in one slot, so a script may touch any of them.
type keys struct{ p string }

func newKeys(prefix string) keys { return keys{p: "{" + prefix + "}:"} }

// replicas: sorted set of replica ids scored by their last heartbeat
// (Redis time, ms).
func (k keys) replicas() string { return k.p + "replicas" }

// boot: set once by the first script that runs against an empty Redis;
// its absence means the fleet's state was lost (a restart).
func (k keys) boot() string { return k.p + "boot" }

// rebuild: present (with a short expiry) right after the state was lost,
// while the replicas re-publish their leases; no lease is granted then.
func (k keys) rebuild() string { return k.p + "rebuild" }

// demand: hash replica id -> "inflight waiting ceiling cap" of one
// provider.
func (k keys) demand(provider string) string { return k.p + "demand:" + provider }

// leases: sorted set of strict-mode lease ids scored by their expiry
// (Redis time, ms).
func (k keys) leases(provider string) string { return k.p + "leases:" + provider }

// freeze: the Redis time (ms) until which growth is frozen fleet-wide.
func (k keys) freeze(provider string) string { return k.p + "freeze:" + provider }

// baseline: hash replica id -> "ttft_ns noise_ns load token_rate samples",
// the learned TTFT baseline of one provider's controller on each replica
// that has one.
func (k keys) baseline(provider string) string { return k.p + "baseline:" + provider }

// limit: hash replica id -> the most of one provider's permits it could
// use: its controller's limit, clamped to its ceiling (share.go). Apart
// from demand so that replicas of a version that reads four fields there
// still read demand.
func (k keys) limit(provider string) string { return k.p + "limit:" + provider }

// rate: hash of one provider's fleet-wide token buckets (see rateScript).
func (k keys) rate(provider string) string { return k.p + "rate:" + provider }

// rateReplicas: sorted set of the replicas syncing one provider's rate
// buckets, scored by their last sync (Redis time, µs).
func (k keys) rateReplicas(provider string) string { return k.p + "rate-replicas:" + provider }

// signals: the pub/sub channel of freezes ("provider until_ms").
func (k keys) signals() string { return k.p + "signals" }
