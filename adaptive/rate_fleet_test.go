package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

// fakeFleet plays the fleet's bucket for one dimension without time
// (no refill): what a coordinator would do against Redis.
type fakeFleet struct{ level, out int64 }

func (f *fakeFleet) sync(now time.Time, r *Rates, plan []FleetDim) {
	for i := range plan {
		d := &plan[i]
		f.level += d.Give
		g := max(min(d.Want, f.level), 0)
		f.level -= g
		f.out += g - d.Give
		d.Granted, d.Level = g, f.level
	}
	r.FleetApply(now, plan)
}

// The pool's accounting: a replica reserves from what it leased, settles
// into it exactly, hands surplus and debt back, and asks for more when a
// request found it short.
func TestFleetPoolAccounting(t *testing.T) {
	t.Parallel()
	clk := vtime.NewClock()
	rs := settings.DefaultRate()
	rs.PerMinute = settings.PerMinute{TPM: 10000}
	r := NewRates(rs, clk)
	wake := make(chan struct{}, 1)
	r.JoinFleet(wake, 2, 100*time.Millisecond)
	if joined, leased := r.InFleet(); !joined || leased {
		t.Fatalf("after JoinFleet: joined %v leased %v, want local until the first sync", joined, leased)
	}
	// Local before the first sync: half the limit, starting empty.
	var res Reservation
	if dec := r.Reserve(clk.Now(), 0, Demand{InputTokens: 10}, nil, 0, &res); !dec.Limited || dec.Retry {
		t.Fatalf("before the first sync: %+v, want refused from an empty local bucket, not a pool", dec)
	}

	fleet := &fakeFleet{level: 10000}
	plan := r.FleetPlan(2)
	if len(plan) != 1 || plan[0].Dim != DimTokens || plan[0].Want != 500 || plan[0].Capacity != 10000 {
		t.Fatalf("first plan %+v, want 500 tokens (a tenth of the bucket over 2 replicas)", plan)
	}
	fleet.sync(clk.Now(), r, plan)
	if _, leased := r.InFleet(); !leased {
		t.Fatal("not leased after a sync")
	}
	// 300 reserved, 100 used: 200 back into the pool.
	if dec := r.Reserve(clk.Now(), 0, Demand{InputTokens: 200, OutputTokens: 100}, nil, 0, &res); dec.Limited {
		t.Fatalf("refused with 500 leased: %+v", dec)
	}
	res.Settle(clk.Now(), Usage{Sent: true, InputTokens: 50, OutputTokens: 50})
	if got := r.FleetStats()[DimTokens].Held; got != 400 {
		t.Fatalf("pool holds %d after using 100 of 500, want 400", got)
	}
	// A request larger than the pool: refused with Retry, and the
	// coordinator woken.
	dec := r.Reserve(clk.Now(), 0, Demand{InputTokens: 900}, nil, 0, &res)
	if !dec.Limited || !dec.Retry || dec.RetryAfter < 100*time.Millisecond {
		t.Fatalf("reservation beyond the pool: %+v, want Limited, Retry, at least a sync interval", dec)
	}
	select {
	case <-wake:
	default:
		t.Fatal("a pool refusal did not wake the coordinator")
	}
	plan = r.FleetPlan(2)
	if plan[0].Want != 2*900-400 {
		t.Fatalf("plan after a 900-token refusal wants %d, want %d (twice the refused request)", plan[0].Want, 2*900-400)
	}
	fleet.sync(clk.Now(), r, plan)
	if dec := r.Reserve(clk.Now(), 0, Demand{InputTokens: 900}, nil, 0, &res); dec.Limited {
		t.Fatalf("refused after the pool was refilled: %+v", dec)
	}
	// It used far more than reserved: the pool owes, and the debt goes to
	// the fleet at the next sync.
	res.Settle(clk.Now(), Usage{Sent: true, InputTokens: 900, OutputTokens: 2000})
	if got := r.FleetStats()[DimTokens].Held; got != 1800-2900 {
		t.Fatalf("pool holds %d, want %d (owing)", got, 1800-2900)
	}
	plan = r.FleetPlan(2)
	if plan[0].Give != -1100 {
		t.Fatalf("plan gives %d, want the debt -1100", plan[0].Give)
	}
	fleet.sync(clk.Now(), r, plan)
	// Leaving hands everything back: the fleet has been charged exactly
	// what was used.
	fleet.sync(clk.Now(), r, r.FleetReturn())
	if fleet.out != 100+2900 {
		t.Fatalf("fleet charged %d tokens, requests used %d", fleet.out, 100+2900)
	}
	if got := r.FleetStats()[DimTokens].Held; got != 0 {
		t.Fatalf("pool holds %d after leaving", got)
	}
	if _, leased := r.InFleet(); leased {
		t.Fatal("leased again by the answer to the leaving sync: nothing would refill its pools")
	}
	if dec := r.Reserve(clk.Now(), 0, Demand{InputTokens: 10}, nil, 0, &res); dec.Limited {
		t.Fatalf("after leaving: %+v, want the full local limit", dec)
	}
}

// Losing the store: the quota is local at limit / replicas, starting with
// what the pool held, and a claim taken from the pool still settles into
// it (to be handed back later).
func TestFleetLocalStartsWithThePool(t *testing.T) {
	t.Parallel()
	clk := vtime.NewClock()
	rs := settings.DefaultRate()
	rs.PerMinute = settings.PerMinute{RPM: 300}
	r := NewRates(rs, clk)
	r.JoinFleet(make(chan struct{}, 1), 3, 100*time.Millisecond)
	fleet := &fakeFleet{level: 300}
	fleet.sync(clk.Now(), r, r.FleetPlan(3)) // 10 requests leased
	var held Reservation
	if dec := r.Reserve(clk.Now(), 0, Demand{}, nil, 0, &held); dec.Limited {
		t.Fatal(dec)
	}
	r.FleetLocal(3)
	if _, leased := r.InFleet(); leased {
		t.Fatal("still leased")
	}
	lv, c, _ := r.Quota().Level(clk.Now(), DimRequests)
	if c != 100 || lv != 9 {
		t.Fatalf("local bucket %d of %d, want the pool's 9 of a third (100)", lv, c)
	}
	held.Settle(clk.Now(), Usage{}) // never sent: back to the pool
	if got := r.FleetStats()[DimRequests].Held; got != 1 {
		t.Fatalf("pool holds %d after a leased claim settled while local, want 1", got)
	}
	n := 0
	for {
		var res Reservation
		if dec := r.Reserve(clk.Now(), 0, Demand{}, nil, 0, &res); dec.Limited {
			break
		}
		n++
	}
	if n != 9 {
		t.Fatalf("admitted %d at once while local, want the 9 the pool held", n)
	}
}

// BenchmarkRateReserveSettleLeased is BenchmarkRateReserveSettle with the
// quota leased from a fleet: reserve from and settle into the pools (no
// store on the path). Run beside it:
//
//	go test -run NONE -bench 'RateReserveSettle' -benchmem ./adaptive/
func BenchmarkRateReserveSettleLeased(b *testing.B) {
	r, _ := benchRates(b, false)
	r.JoinFleet(make(chan struct{}, 1), 1, 100*time.Millisecond)
	plan := r.FleetPlan(1)
	for i := range plan {
		plan[i].Granted = plan[i].Capacity
	}
	r.FleetApply(time.Now(), plan)
	d := Demand{InputTokens: 800, OutputTokens: 400}
	// Never sent: everything goes back, so the pools (never refilled
	// here) stay full; the operations are those of any settle.
	u := Usage{}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var res Reservation
		for pb.Next() {
			now := time.Now()
			if dec := r.Reserve(now, 0, d, nil, 0, &res); dec.Limited {
				b.Fatalf("refused: %+v %+v", dec, r.FleetStats())
			}
			res.Settle(now, u)
		}
	})
}
