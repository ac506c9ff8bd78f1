package cluster

import (
	"sort"
	"time"
)

// demand is one replica's load on one provider, as it published it.
type demand struct {
	id       string
	inflight int // permits in use
	waiting  int // requests queued for a permit (demandLocked)
	ceiling  int // its configured ceiling
	// cap is its claim: the most permits it may hold until it claims
	// again (permits in use beyond it stay until they end). Counted as
	// used by every other replica (headroom), so nobody grows into
	// permits still promised.
	cap int
	// own is the most it could use if the fleet let it: its controller's
	// limit clamped to its ceiling (adaptive.Limiter.FleetDemand); -1 when
	// it did not say (a replica of a version before it).
	own int
}

// want is what the replica asks for: its share of the ceiling follows it.
func (d demand) want() int { return d.inflight + d.waiting }

// usable is the most of its want the replica could use: a replica whose
// own controller holds it below its share asks for no more than that, so
// the rest of the ceiling goes to the others.
func (d demand) usable() int {
	if d.own < 0 {
		return d.want()
	}
	return min(d.want(), d.own)
}

// allocate splits ceiling among the replicas of ds (sorted by id, so every
// replica computes the same split from the same heartbeat). The shares add
// up to the ceiling, and none is more than its replica could use unless
// the whole fleet could use less than the ceiling.
//
// When the fleet could use less than the ceiling, each replica gets what
// it could use and the slack is split evenly, so an idle replica can
// admit at once. Otherwise every request in the fleet is treated alike,
// wherever it waits: each replica that asks for anything gets one permit,
// then the rest goes in proportion to what each asks for beyond it (a
// replica with 80% of the fleet's demand gets about 80% of the ceiling,
// like one Sluice in front of the provider), none beyond what it could
// use; what a replica cannot use goes to the others in the same
// proportion. A replica that asks for nothing gets nothing: every permit
// goes where a request waits for it. Remainders go by largest fraction,
// ties by id order. Integer arithmetic only, so that replicas on
// different platforms compute the same split.
func allocate(ceiling int, ds []demand) []int {
	n := len(ds)
	out := make([]int, n)
	if n == 0 || ceiling <= 0 {
		return out
	}
	use := make([]int, n)
	total, busy := 0, 0
	for i, d := range ds {
		use[i] = d.usable()
		total += use[i]
		if use[i] > 0 {
			busy++
		}
	}
	if total < ceiling {
		slack := ceiling - total
		for i := range ds {
			out[i] = use[i] + slack/n
		}
		for i := 0; i < slack%n; i++ {
			out[i]++
		}
		return out
	}
	rest := int64(ceiling)
	if busy <= ceiling {
		// One permit each first: a replica with a little demand beside
		// a long queue elsewhere is not rounded down to nothing.
		for i := range ds {
			if use[i] > 0 {
				out[i] = 1
			}
		}
		rest -= int64(busy)
	}
	// Water-filling: replica i gets min(room_i, λ·weight_i) more, with λ
	// such that it all adds up to rest. Replicas reach their room in the
	// order of room/weight; those that do are settled, the others share
	// what is left by weight.
	weight, room := make([]int64, n), make([]int64, n)
	var W int64
	order := make([]int, 0, n)
	for i, d := range ds {
		weight[i], room[i] = int64(d.want()-out[i]), int64(use[i]-out[i])
		if room[i] > 0 {
			W += weight[i]
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool {
		i, j := order[a], order[b]
		return room[i]*weight[j] < room[j]*weight[i]
	})
	k := 0
	for ; k < len(order) && W > 0; k++ {
		i := order[k]
		if room[i]*W > rest*weight[i] {
			break // it takes less than its room: so do the rest
		}
		out[i] += int(room[i])
		rest -= room[i]
		W -= weight[i]
	}
	active := order[k:]
	if len(active) == 0 || W == 0 {
		return out
	}
	frac := make([]int64, n)
	given := int64(0)
	for _, i := range active {
		num := rest * weight[i]
		out[i] += int(num / W)
		frac[i] = num % W
		given += num / W
	}
	sort.SliceStable(active, func(a, b int) bool { return frac[active[a]] > frac[active[b]] })
	for j := int64(0); j < rest-given; j++ {
		out[active[int(j)%len(active)]]++
	}
	return out
}

// headroom is what the replicas of ds other than self leave of ceiling:
// each may still use the most of its permits in use (a replica whose cap
// shrank keeps its streams until they end) and its claim (it may admit up
// to that until it claims again). claimScript computes the same in Redis,
// atomically with the claim it grants.
func headroom(ceiling int, ds []demand, self int) int {
	others := 0
	for i, d := range ds {
		if i != self {
			others += max(d.inflight, d.cap)
		}
	}
	return ceiling - others
}

// fleetCeiling is the smallest ceiling the live replicas publish: during a
// rolling change of the ceiling the fleet keeps to the lower one. A
// ceiling far from this replica's (farCeiling) is not taken: it is a
// value read from Redis that no change of configuration explains, and one
// replica (or one write to Redis) must not cut the whole fleet to it. far
// is the first such replica, for the warning; nil when there is none.
func fleetCeiling(local int, ds []demand) (c int, far *demand) {
	c = local
	for i, d := range ds {
		if d.ceiling <= 0 {
			continue
		}
		if farCeiling(local, d.ceiling) {
			if far == nil {
				far = &ds[i]
			}
			continue
		}
		c = min(c, d.ceiling)
	}
	return c, far
}

// farCeilingRatio is how far a peer's ceiling may be from this replica's,
// either way, and still be taken as the fleet's: a rolling change of the
// ceiling by more than this factor is done in steps.
const farCeilingRatio = 4

// farCeiling reports whether a peer's ceiling is more than farCeilingRatio
// times this replica's, or less than its 1/farCeilingRatio.
func farCeiling(local, peer int) bool {
	return peer > farCeilingRatio*local || farCeilingRatio*peer < local
}

// degradedCap is a replica's cap while Redis cannot be reached: an equal
// part of the ceiling for each replica last seen, never the whole ceiling
// unless this replica was alone.
func degradedCap(ceiling, replicas int) int {
	return max(1, ceiling/max(1, replicas))
}

// firstClaim bounds a replica's claim at its first heartbeat: replicas of
// the fleet that started with it may not have published yet, and each may
// admit up to its starting cap (degradedCap with the expected fleet size)
// until it does. Their starting caps are held back for them until every
// replica has had a heartbeat.
func firstClaim(ceiling, expected int, ds []demand, self int) int {
	unseen := max(0, expected-len(ds))
	return headroom(ceiling, ds, self) - unseen*degradedCap(ceiling, expected)
}

// holdFor is how long a replica keeps asking for one permit after it last
// had demand, or a share of the fleet's slack: ten heartbeats. A replica
// whose clients come and go, or one that was idle while the fleet had
// room, keeps a permit for its next request instead of admitting it on
// the limiter's minimum, beyond what the fleet counted, until its next
// heartbeat and the others' streams make room. A replica idle longer than
// this holds nothing, so that every permit goes where requests wait.
func holdFor(hb time.Duration) time.Duration { return holdBeats * hb }

const holdBeats = 10

// slack reports whether the replicas of ds could use less than ceiling:
// allocate shares the rest out evenly.
func slack(ceiling int, ds []demand) bool {
	total := 0
	for _, d := range ds {
		total += d.usable()
	}
	return total < ceiling
}
