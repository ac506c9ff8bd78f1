// Package settings holds one type per block of a provider's YAML
// configuration that the admission code runs on: the concurrency limit
// ([Limit]), the wait queue ([Queue]), the rate limits ([Rate]), retries
// ([Retries]), the circuit breaker ([Breaker]), the limit-related part of
// an upstreams: entry ([Upstream]), the fleet timings of the cluster
// block ([Fleet]) and the clients' policies (the top-level clients:
// block, [Clients]).
//
// Each type is decoded from YAML as is (its yaml tags are the keys of its
// block) and used as is by the code it configures: the config package
// decodes into it, adaptive runs on it, nothing translates between them.
// So each block's defaults (one Default function per type), the defaults
// that follow from other settings (Complete), its valid ranges (Problems,
// keyed by the YAML key inside the block) and its deprecated keys are
// written once, here.
//
// The package imports nothing else from Sluice, so that both config and
// adaptive can use it.
package settings
