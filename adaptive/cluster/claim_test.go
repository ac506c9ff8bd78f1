package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// claimScript grants what headroom computes, over the replicas that beat
// within dead_after (others, malformed entries and this replica's own are
// not counted), never more than asked, and records the claim, or the
// claim in force if higher, in the same step.
func TestClaimScriptGrantsHeadroom(t *testing.T) {
	t.Parallel()
	rs := startRedis(t)
	rdb := rs.client(t)
	ctx := context.Background()
	k := newKeys("claim")
	rng := rand.New(rand.NewPCG(25, 5))
	const deadAfter = 3 * time.Second
	for run := range 200 {
		if err := rdb.Del(ctx, k.replicas(), k.demand("p")).Err(); err != nil {
			t.Fatal(err)
		}
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		ceiling := []int{5, 30, 2000}[rng.IntN(3)]
		var live []demand
		for i := range rng.IntN(6) {
			d := demand{id: fmt.Sprintf("r%d", i), inflight: rng.IntN(ceiling/2 + 1), waiting: rng.IntN(ceiling), ceiling: ceiling, cap: rng.IntN(ceiling/2 + 1)}
			age := time.Duration(rng.IntN(int(deadAfter / time.Millisecond)))
			if rng.IntN(4) == 0 {
				age += deadAfter + time.Millisecond // silent too long: not counted
			} else {
				live = append(live, d)
			}
			rdb.ZAdd(ctx, k.replicas(), zmember(d.id, now.Add(-age)))
			rdb.HSet(ctx, k.demand("p"), d.id, fmt.Sprintf("%d %d %d %d", d.inflight, d.waiting, d.ceiling, d.cap))
		}
		rdb.HSet(ctx, k.demand("p"), "gone", "9 9 9 9")     // no beat at all
		rdb.ZAdd(ctx, k.replicas(), zmember("broken", now)) // live, unreadable
		rdb.HSet(ctx, k.demand("p"), "broken", "9 x 9")
		self := demand{id: "self", inflight: rng.IntN(ceiling), waiting: rng.IntN(ceiling), ceiling: ceiling}
		rdb.ZAdd(ctx, k.replicas(), zmember(self.id, now))
		want, held := rng.IntN(ceiling+1), rng.IntN(ceiling/2+1)
		res, err := claimScript.Run(ctx, rdb, []string{k.replicas(), k.demand("p")},
			self.id, deadAfter.Milliseconds(), 1, self.inflight, self.waiting, self.ceiling, want, held, ceiling).Slice()
		if err != nil {
			t.Fatal(err)
		}
		ds := append([]demand{self}, live...)
		wantG := max(0, min(want, headroom(ceiling, ds, 0)))
		if g, _ := res[0].(int64); int(g) != wantG {
			t.Fatalf("run %d: granted %d, want %d (ceiling %d, asked %d, live others %+v)", run, g, wantG, ceiling, want, live)
		}
		rec, err := rdb.HGet(ctx, k.demand("p"), self.id).Result()
		if err != nil {
			t.Fatal(err)
		}
		if exp := fmt.Sprintf("%d %d %d %d", self.inflight, self.waiting, ceiling, max(wantG, held)); rec != exp {
			t.Fatalf("run %d: recorded %q, want %q", run, rec, exp)
		}
	}
}

// zmember is a replica's beat at at, as the heartbeat scores it.
func zmember(id string, at time.Time) redis.Z {
	return redis.Z{Score: float64(at.UnixMilli()), Member: id}
}
