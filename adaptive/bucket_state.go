package adaptive

import (
	"time"

	"github.com/sluicehq/sluice/adaptive/internal/bucket"
)

// A bucket's whole state is one word, its GCRA theoretical arrival time,
// with two parameters (capacity and interval) that change only on a
// resize. That is what a fleet of replicas would share to enforce one rate
// limit together (GCRA in a Redis Lua script: the same arithmetic on the
// same word), so it is kept readable here, and the operations a quota
// performs on a bucket are the small BucketOps interface below. A fleet
// shares a provider's own quota differently, without a round trip per
// operation: replicas lease tokens from the fleet's bucket into local
// pools (rate_fleet.go), and the local buckets serve while the fleet's
// store cannot be reached.

// GCRAState is one bucket's state: TAT is its theoretical arrival time,
// in ticks (1/16 ns) since its quota's epoch; the bucket holds Capacity
// tokens and refills one every Interval ticks (Capacity per Window).
type GCRAState struct {
	TAT      int64
	Interval int64
	Capacity int64
	Window   time.Duration
	// Epoch is the quota's time origin: TAT's zero.
	Epoch time.Time
}

// BucketOps are the operations a Quota performs on each of its buckets,
// times and amounts in ticks and tokens. Implemented by the local bucket;
// the seam where a fleet-wide source would plug in.
type BucketOps interface {
	// Reserve takes cost at now if it fits within maxWait (see
	// bucket.Bucket).
	Reserve(now int64, cost, maxWait int64) (wait int64, ok, tooLarge, on bool)
	// WaitFor reports how long until cost would fit (-1: never).
	WaitFor(now int64, cost int64) int64
	// Adjust gives back (delta < 0) or takes (delta > 0) tokens.
	Adjust(now int64, delta int64)
	// Level reports the tokens left at now.
	Level(now int64) (level, capacity int64, ok bool)
}

var _ BucketOps = (*bucket.Bucket)(nil)

// State returns dimension d's bucket state; ok is false when d is not
// limited.
func (q *Quota) State(d Dim) (GCRAState, bool) {
	tat, capacity, interval, window, on := q.b[d].State()
	if !on {
		return GCRAState{}, false
	}
	return GCRAState{TAT: tat, Interval: interval, Capacity: capacity, Window: window, Epoch: q.clk.Epoch}, true
}
