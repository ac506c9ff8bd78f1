package config

// Rules are the defaults and valid ranges that the config package does not
// own. A provider's limit, queue, rate, retries and breaker blocks, and the
// adaptive part of its upstreams, are the admission code's parameters:
// the package that does that maths (adaptive) decides their defaults and
// ranges, and config, which imports nothing of Sluice's, is handed them.
// The binary passes proxy.ConfigRules(), which translates adaptive's.
//
// With the zero Rules those blocks have no defaults and are not checked;
// every caller that loads a real file passes real rules.
type Rules struct {
	Limit   BlockRules[Limit]
	Queue   BlockRules[Queue]
	Rate    BlockRules[Rate]
	Retries BlockRules[Retries]
	Breaker BlockRules[Breaker]
	// Upstream is the rules of each entry of a provider's upstreams:
	// list (weight, ceiling, rate); Check keys are inside the entry
	// ("rate.tpm").
	Upstream BlockRules[Upstream]
	// SeveralUpstreams says the binary serves a provider's upstreams:
	// list. A binary whose request path does not yet passes false, and a
	// list is then rejected with a message saying so (it is still checked
	// in full), rather than accepted and ignored.
	SeveralUpstreams bool
	// Cluster is the cluster block's: its Default is the block before the
	// file's keys are decoded over it (an absent block keeps it, and is
	// off: Redis empty); Check sees it only when it is on.
	Cluster BlockRules[Cluster]
}

// BlockRules are the defaults and checks of one block of a provider.
type BlockRules[T any] struct {
	// Default is the block of a provider that sets none of its keys; keys
	// present in the file are decoded over it.
	Default T
	// Complete, when not nil, fills in defaults that depend on other keys
	// (e.g. a defaulted limit.min is capped at a lower limit.ceiling). set
	// reports whether a key of the block was written in the file.
	Complete func(v T, set func(key string) bool) T
	// Check, when not nil, lists every problem of a complete block, keyed
	// by the block's YAML key ("backoff").
	Check func(v T) []Issue
	// Deprecated maps a key that is still accepted but no longer does
	// anything to what to tell the user; a file that sets it loads, with a
	// warning in Config.Warnings naming the file and line.
	Deprecated map[string]string
}

// Issue is one problem a BlockRules.Check found.
type Issue struct {
	Key string // YAML key inside the block
	Msg string // e.g. "must be at least 0.5 and less than 1, got 1"
}

func (b BlockRules[T]) complete(v T, set func(key string) bool) T {
	if b.Complete == nil {
		return v
	}
	return b.Complete(v, set)
}

// check reports b's issues of v under path (e.g. "providers[0].limit").
func (b BlockRules[T]) check(v *validator, path string, val T) {
	if b.Check == nil {
		return
	}
	for _, is := range b.Check(val) {
		v.add(path+"."+is.Key, "%s", is.Msg)
	}
}
