package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/internal/bucket"
)

// TestAccountFloodKeepsBusyAccounts: a flood of new keys into a full
// table takes the places of idle accounts only; an account in use (a
// request in flight, or one within accountIdle) keeps its learned quota,
// and the keys that find no place get none (not someone else's).
func TestAccountFloodKeepsBusyAccounts(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	tab := newAccountTable(now, Limits{}, 4, true)
	busy := tab.acquire(now, QuotaKey{Account: 1, Model: 7}) // held: in flight
	recent := tab.acquire(now, QuotaKey{Account: 2, Model: 7})
	tab.release(recent)
	idle := tab.acquire(now.Add(-2*accountIdle), QuotaKey{Account: 3, Model: 7})
	tab.release(idle)
	if busy == nil || recent == nil || idle == nil {
		t.Fatal("no place in an empty table")
	}
	busy.q.initQuota(now, now, Limits{Requests: 10}, true) // stands for what it learned
	placed := 0
	for k := uint64(100); k < 200; k++ {
		if mq := tab.acquire(now, QuotaKey{Account: k, Model: 7}); mq != nil {
			placed++
			tab.release(mq)
		}
	}
	// One free place, and the idle account's: the flood got two places
	// (each new key stays recent, so it keeps its place from the next).
	if placed != 2 {
		t.Errorf("flood got %d places, want 2 (the free one and the idle account's)", placed)
	}
	if got := tab.acquire(now, QuotaKey{Account: 1, Model: 7}); got != busy || !got.q.on() {
		t.Errorf("busy account lost its quota")
	} else {
		tab.release(got)
	}
	if got := tab.acquire(now, QuotaKey{Account: 2, Model: 7}); got != recent {
		t.Errorf("account used within accountIdle lost its place")
	} else {
		tab.release(got)
	}
	if s := tab.stats(now, &[NumDims]QuotaDimStats{}); s.Overflow != 98 {
		t.Errorf("overflow %d, want 98", s.Overflow)
	}
}

// TestAccountModelsBounded: an account learns at most
// maxModelsPerAccount models' quotas; more models find no place while the
// others are in use, and the account's other models keep theirs.
func TestAccountModelsBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	tab := newAccountTable(now, Limits{}, 16, true)
	var held []*modelQuota
	for m := range uint64(maxModelsPerAccount) {
		mq := tab.acquire(now, QuotaKey{Account: 1, Model: m})
		if mq == nil {
			t.Fatalf("model %d: no place", m)
		}
		held = append(held, mq)
	}
	if mq := tab.acquire(now, QuotaKey{Account: 1, Model: 99}); mq != nil {
		t.Fatal("a model beyond the account's places got one")
	}
	if mq := tab.acquire(now, QuotaKey{Account: 2, Model: 99}); mq == nil {
		t.Fatal("another account's model found no place")
	}
	for _, mq := range held {
		tab.release(mq)
	}
	if mq := tab.acquire(now.Add(accountIdle), QuotaKey{Account: 1, Model: 99}); mq == nil {
		t.Fatal("a new model found no place after the others went idle")
	}
}

// TestInjectedKeyIsOneAccount: with an injected key the credential does
// not matter (one account), and each model has its own quota.
func TestInjectedKeyIsOneAccount(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	tab := newAccountTable(now, Limits{}, 16, false)
	a := tab.acquire(now, QuotaKey{Account: 1, Model: 5})
	b := tab.acquire(now, QuotaKey{Account: 2, Model: 5})
	c := tab.acquire(now, QuotaKey{Account: 1, Model: 6})
	if a == nil || a != b {
		t.Error("two credentials of an injected key got different quotas")
	}
	if c == nil || c == a {
		t.Error("two models shared a quota")
	}
}

// TestAccountLookupAllocatesNothing: once an account and its model have a
// place, looking them up and giving them back allocates nothing.
func TestAccountLookupAllocatesNothing(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := newAccountTable(now, Limits{}, 64, true)
	k := QuotaKey{Account: 42, Model: 3}
	tab.release(tab.acquire(now, k))
	if n := testing.AllocsPerRun(100, func() { tab.release(tab.acquire(now, k)) }); n != 0 {
		t.Fatalf("%v allocations per lookup", n)
	}
}

// TestAccountRetryAfterHoldsItsQuota: an account's Retry-After holds that
// quota's requests until then, never longer than the quota's window.
func TestAccountRetryAfterHoldsItsQuota(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		ra, want time.Duration
	}{{30 * time.Second, 30 * time.Second}, {1000 * time.Hour, time.Minute}} {
		var q Quota
		q.initQuota(now, now, Limits{Requests: 100}, true)
		q.holdUntil(now, c.ra)
		if w := q.waitFor(q.clk.Ticks(now), Demand{}.costs()); w <= 0 || absDur(timeOfTicks(w)-c.want) > time.Second {
			t.Errorf("Retry-After %v: a request waits %v, want %v", c.ra, timeOfTicks(w), c.want)
		}
	}
}

func timeOfTicks(t int64) time.Duration { return bucket.DurationOf(t) }

func absDur(d time.Duration) time.Duration { return max(d, -d) }
