package settings

// Upstream is what the upstream choice needs of one upstream of a provider
// (an entry of upstreams:, whose URL, key and headers the config package
// keeps beside it).
type Upstream struct {
	// Name identifies the upstream in metrics, the status page and the
	// response header naming who served a request; it is also the identity
	// its learned state (limit, quota, breaker) keeps across reloads.
	// Unique within the provider; the config package checks its spelling
	// and names an unnamed entry by its index.
	Name string `yaml:"name"`
	// Weight scales the upstream's share: upstreams are ranked by load
	// relative to their limits divided by weight, so with equal limits,
	// weights 3 and 1 split traffic 3:1. Default 1, 1..1000.
	Weight int `yaml:"weight"`
	// Ceiling caps the requests in flight to this upstream (a contractual
	// concurrency, a small replica). 0 (default): only its adaptive limit
	// and the provider's ceiling apply; else 1..MaxCeiling.
	Ceiling int `yaml:"ceiling"`
	// Rate is this upstream's known quota (its key's tier limits), counted
	// the way providers count. 0 leaves a dimension to be learned from the
	// provider's headers (or unlimited if it reports none).
	Rate PerMinute `yaml:"rate"`
	// Passthrough: Sluice injects no key into this upstream's requests,
	// so each client's credential is its own account at the provider,
	// with its own quota. Not a YAML key: set from whether a key is
	// configured.
	Passthrough bool `yaml:"-"`
}

// Bounds of the upstream settings.
const (
	// MaxUpstreams bounds a provider's upstreams: list.
	MaxUpstreams = 64
	maxWeight    = 1000
)

// DefaultUpstream returns weight 1, no cap of its own, no known quota.
func DefaultUpstream() Upstream { return Upstream{Weight: 1} }

// Problems lists every invalid setting of an upstream; Key is the key
// inside its upstreams: entry ("weight", "rate.tpm").
func (u Upstream) Problems() []Problem {
	var ps problems
	if u.Weight < 1 || u.Weight > maxWeight {
		ps.bad("weight", "must be between 1 and %d, got %d", maxWeight, u.Weight)
	}
	if u.Ceiling < 0 || u.Ceiling > MaxCeiling {
		ps.bad("ceiling", "must be 0 (the provider's) or between 1 and %d, got %d", MaxCeiling, u.Ceiling)
	}
	ps.perMinute("rate.", u.Rate)
	return ps
}
