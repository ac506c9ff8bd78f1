package adaptive

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// TestClientTableBounded: no more than max_keys keys are tracked; an idle
// key is evicted for a new one, a key with a request in flight never is,
// and when every entry of a shard is busy a new key shares the overflow
// quota.
func TestClientTableBounded(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	tab := newClientTable(clk.Now(), clk.Now(), Limits{Requests: 10}, 3) // 3 shards of one entry
	for k := range uint64(50) {
		clk.Advance(time.Millisecond)
		tab.release(tab.acquire(clk.Now(), k))
	}
	if n := tab.tracked(); n != 3 {
		t.Fatalf("tracked %d keys, want 3", n)
	}
	// Hold key 0 (shard 0); key 3 maps to the same shard and must not
	// take its entry.
	held := tab.acquire(clk.Now(), 0)
	if held == &tab.overflow {
		t.Fatal("key 0 went to the overflow quota")
	}
	var c claim
	held.q.reserve(clk.Now(), &c, Demand{}.costs(), 0)
	other := tab.acquire(clk.Now(), 3)
	if other != &tab.overflow {
		t.Fatalf("a new key took the entry of a key in flight")
	}
	tab.release(other)
	if lv, _, _ := held.q.Level(clk.Now(), DimRequests); lv != 9 {
		t.Fatalf("held key's level %d, want 9: its entry was reset", lv)
	}
	held.q.settle(clk.Now(), &c, Usage{Sent: true})
	tab.release(held)
	// Idle, but key 0's quota is still spent: key 3 shares the overflow.
	if e := tab.acquire(clk.Now(), 3); e != &tab.overflow {
		t.Fatal("a new key took the entry of a key whose quota is spent")
	}
	// Refilled, key 0's entry goes to key 3, afresh.
	clk.Advance(time.Minute)
	e := tab.acquire(clk.Now(), 3)
	if e == &tab.overflow || e != held {
		t.Fatal("idle entry not reused")
	}
	if lv, _, _ := e.q.Level(clk.Now(), DimRequests); lv != 10 {
		t.Fatalf("reused entry level %d, want a full 10", lv)
	}
	tab.release(e)
}

// TestKeyHasher: equal keys hash equal, different hashers (processes)
// disagree, and hashing does not allocate.
func TestKeyHasher(t *testing.T) {
	h1, h2 := NewKeyHasher(), NewKeyHasher()
	k := []byte("sk-live-abcdef")
	if h1.Sum(k) != h1.Sum([]byte("sk-live-abcdef")) || h1.Sum(k) == h1.Sum([]byte("sk-live-abcdeg")) {
		t.Fatal("hash does not identify the key")
	}
	if h1.Sum(k) == h2.Sum(k) {
		t.Fatal("two hashers with random seeds agree")
	}
	if a := testing.AllocsPerRun(100, func() { h1.Sum(k) }); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

// TestPerClientLimits: one client spending its quota does not limit
// another; the provider's quota is shared by both.
func TestPerClientLimits(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	rs := settings.DefaultRate()
	rs.PerMinute = settings.PerMinute{RPM: 15}
	rs.PerClient.PerMinute = settings.PerMinute{RPM: 10}
	r := NewRates(rs, clk)
	now := clk.Now()
	var res Reservation
	for i := range 10 {
		if dec := r.Reserve(now, 1, Demand{}, nil, 0, &res); dec.Limited {
			t.Fatalf("client 1 request %d refused: %+v", i, dec)
		}
		res.Settle(now, Usage{Sent: true})
	}
	dec := r.Reserve(now, 1, Demand{}, nil, 0, &res)
	if !dec.Limited || dec.Scope != ScopeClient || dec.RetryAfter != 6*time.Second {
		t.Fatalf("client 1's 11th: %+v, want limited by the client quota, retry after 6s", dec)
	}
	for i := range 5 {
		if dec := r.Reserve(now, 2, Demand{}, nil, 0, &res); dec.Limited {
			t.Fatalf("client 2 request %d refused: %+v", i, dec)
		}
		res.Settle(now, Usage{Sent: true})
	}
	// The provider's 15 are spent: client 2 is refused by the provider,
	// and the Retry-After is the provider's (4 s), not client 2's (0).
	dec = r.Reserve(now, 2, Demand{}, nil, 0, &res)
	if !dec.Limited || dec.Scope != ScopeProvider || dec.RetryAfter != 4*time.Second {
		t.Fatalf("client 2's 6th: %+v, want limited by the provider, retry after 4s", dec)
	}
	// Client 1 is refused by the provider first, but its honest
	// Retry-After is its own longer wait.
	dec = r.Reserve(now, 1, Demand{}, nil, 0, &res)
	if !dec.Limited || dec.RetryAfter != 6*time.Second {
		t.Fatalf("client 1 again: %+v, want retry after 6s (the longest wait)", dec)
	}
	clk.Advance(6 * time.Second)
	if dec := r.Reserve(clk.Now(), 1, Demand{}, nil, 0, &res); dec.Limited {
		t.Fatalf("after the Retry-After: %+v", dec)
	}
	res.Settle(clk.Now(), Usage{Sent: true})
	if s := r.Stats(clk.Now()); s.Limited[ScopeClient] != 1 || s.Limited[ScopeProvider] != 2 || s.ClientKeys != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRatesWaitAndTooLarge: a request that fits within max_wait is
// reserved with the wait it must make; one larger than a capacity is
// refused for good.
func TestRatesWaitAndTooLarge(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	rs := settings.DefaultRate()
	rs.PerMinute = settings.PerMinute{TPM: 6000}
	r := NewRates(rs, clk)
	now := clk.Now()
	var res Reservation
	if dec := r.Reserve(now, 0, r.Demand(5000, 0), nil, time.Hour, &res); !dec.TooLarge {
		t.Fatalf("5000 + the default 1024 output tokens on a 6000 capacity: %+v, want too large", dec)
	}
	if dec := r.Reserve(now, 0, r.Demand(5000, 100), nil, 0, &res); dec.Limited || dec.Wait != 0 {
		t.Fatalf("first: %+v", dec)
	}
	res.Settle(now, Usage{Sent: true, InputTokens: 5000, OutputTokens: 100})
	// 900 left; 2000 more fit in 11 s at 100 tokens per second.
	dec := r.Reserve(now, 0, Demand{InputTokens: 1000, OutputTokens: 1000}, nil, 20*time.Second, &res)
	if dec.Limited || dec.Wait != 11*time.Second || dec.Scope != ScopeProvider {
		t.Fatalf("second: %+v, want a wait of 11s", dec)
	}
	res.Settle(now, Usage{})
	if s := r.Stats(now); s.TooLarge != 1 || s.Waited != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRatesReconfigure: new limits keep the tokens in use; turning
// per-client limits off drops the table.
func TestRatesReconfigure(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	s := settings.DefaultRate()
	s.PerMinute = settings.PerMinute{RPM: 5}
	s.PerClient.PerMinute, s.PerClient.MaxKeys = settings.PerMinute{RPM: 5}, 10
	r := NewRates(s, clk)
	now := clk.Now()
	var res Reservation
	r.Reserve(now, 7, Demand{}, nil, 0, &res)
	s.PerMinute = settings.PerMinute{RPM: 100}
	s.PerClient.PerMinute = settings.PerMinute{RPM: 50}
	r.Reconfigure(s)
	if lv := quotaLevel(t, r.Quota(), now, DimRequests); lv != 99 {
		t.Fatalf("provider level %d, want 99", lv)
	}
	e := r.clients.Load().acquire(now, 7)
	if lv := quotaLevel(t, &e.q, now, DimRequests); lv != 49 {
		t.Fatalf("client level %d, want 49 (its request carried over)", lv)
	}
	r.clients.Load().release(e)
	res.Settle(now, Usage{})
	s.PerClient.PerMinute = settings.PerMinute{}
	r.Reconfigure(s)
	if r.clients.Load() != nil {
		t.Fatal("per-client table kept with no per-client limit")
	}
}

// TestRotatedKeysGainNothing: a client that spent its quota and then
// sends each request with a new key, so that the table must make room,
// gets no fresh quota: the spent entries are not reused while they owe,
// the new keys share the overflow quota (one client's worth), and the
// victim's own quota is untouched.
func TestRotatedKeysGainNothing(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	rs := settings.DefaultRate()
	rs.PerClient.PerMinute = settings.PerMinute{RPM: 5}
	rs.PerClient.MaxKeys = 4
	r := NewRates(rs, clk)
	admitted := 0
	for k := range uint64(100) {
		var res Reservation
		dec := r.Reserve(clk.Now(), 1000+k, Demand{}, nil, 0, &res)
		if !dec.Limited {
			admitted++
			res.Settle(clk.Now(), Usage{Sent: true})
		}
		clk.Advance(10 * time.Millisecond)
	}
	// Four table entries of 5 and the overflow's 5: 25 at most in a
	// second, against 100 when every new key got a fresh quota.
	if admitted > 25 {
		t.Fatalf("100 rotated keys got %d requests in a second, want at most 25 (4 entries and the overflow, 5 each)", admitted)
	}
}
