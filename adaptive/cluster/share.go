package cluster

import "sort"

// demand is one replica's load on one provider, as it published it.
type demand struct {
	id       string
	inflight int // permits in use
	waiting  int // requests queued for a permit
	ceiling  int // its configured ceiling
	cap      int // its cap when it published this: what it may admit until its next heartbeat
}

func (d demand) want() int { return d.inflight + d.waiting }

// floorOf is the share every live replica keeps whatever its demand, so
// that an idle replica can still admit (and so publish the demand that
// grows its share at the next heartbeat): a tenth of the ceiling split
// among the replicas, at least one permit.
func floorOf(ceiling, n int) int {
	return max(1, ceiling/(10*n))
}

// allocate splits ceiling among the replicas of ds (sorted by id, so every
// replica computes the same split from the same heartbeat): each gets the
// floor, and the rest goes by demand above the floor. When the fleet wants
// less than the ceiling, each gets what it wants and the slack is split
// evenly; when it wants more, the rest is split in proportion to demand.
// Remainders go by largest fraction, ties by id. The shares add up to the
// ceiling whenever it is at least one permit per replica.
func allocate(ceiling int, ds []demand) []int {
	n := len(ds)
	out := make([]int, n)
	if n == 0 {
		return out
	}
	fl := floorOf(ceiling, n)
	rest := ceiling - n*fl
	if rest < 0 {
		rest = 0 // more replicas than permits: everybody keeps one
	}
	extra := make([]int, n)
	total := 0
	for i, d := range ds {
		extra[i] = max(0, d.want()-fl)
		total += extra[i]
	}
	frac := make([]int64, n) // remainder numerators for largest-remainder rounding
	given := 0
	for i := range ds {
		if total <= rest {
			out[i] = fl + extra[i]
			given += extra[i]
			continue
		}
		num := int64(rest) * int64(extra[i])
		q := int(num / int64(total))
		out[i] = fl + q
		frac[i] = num % int64(total)
		given += q
	}
	left := rest - given
	if total <= rest {
		// Slack: split evenly, remainder by id order.
		for i := range out {
			out[i] += left / n
		}
		for i := 0; i < left%n; i++ {
			out[i]++
		}
		return out
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return frac[order[a]] > frac[order[b]] })
	for i := 0; i < left; i++ {
		out[order[i%n]]++
	}
	return out
}

// capOf is replica self's cap: its share, lowered while the others may
// still use more than theirs, so that growing into a share never adds to
// permits the others have not given back yet. What another replica may use
// until its next heartbeat is the most of its share, its permits in use (a
// replica whose share shrank keeps its streams until they end) and the
// cap it last published (it admits up to that until it recomputes). At
// least one permit.
func capOf(ceiling int, ds []demand, shares []int, self int) int {
	others := 0
	for i, d := range ds {
		if i != self {
			others += max(shares[i], d.inflight, d.cap)
		}
	}
	return max(1, min(shares[self], ceiling-others))
}

// fleetCeiling is the smallest ceiling the live replicas publish: during a
// rolling change of the ceiling the fleet keeps to the lower one.
func fleetCeiling(local int, ds []demand) int {
	c := local
	for _, d := range ds {
		if d.ceiling > 0 && d.ceiling < c {
			c = d.ceiling
		}
	}
	return c
}

// degradedCap is a replica's cap while Redis cannot be reached: an equal
// part of the ceiling for each replica last seen, never the whole ceiling
// unless this replica was alone.
func degradedCap(ceiling, replicas int) int {
	return max(1, ceiling/max(1, replicas))
}
