package adaptive

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/settings"
)

// testVClock is a virtual clock that only Advance moves. Safe for concurrent
// use.
type testVClock struct {
	base time.Time
	ns   atomic.Int64
}

func newVClock() *testVClock                        { return &testVClock{base: time.Unix(1_800_000_000, 0)} }
func (c *testVClock) Now() time.Time                { return c.base.Add(time.Duration(c.ns.Load())) }
func (c *testVClock) Advance(d time.Duration)       { c.ns.Add(int64(d)) }
func (c *testVClock) Set(d time.Duration) time.Time { c.ns.Store(int64(d)); return c.Now() }

func quotaLevel(t testing.TB, q *Quota, now time.Time, d Dim) int64 {
	t.Helper()
	lv, _, ok := q.Level(now, d)
	if !ok {
		t.Fatalf("dimension %s not limited", d)
	}
	return lv
}

// TestBucketReserveWaitRefill: a bucket holds a minute's worth, refills
// continuously, tells a request that does not fit how long until it does,
// and gives a refund back up to its capacity only.
func TestBucketReserveWaitRefill(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	var q Quota
	q.initQuota(clk.Now(), clk.Now(), Limits{Requests: 60}, false)
	cost := Demand{}.costs()
	var c claim
	for i := range 60 {
		if w, ok, _ := q.reserve(clk.Now(), &c, cost, 0); !ok || w != 0 {
			t.Fatalf("request %d of 60: ok %v wait %v", i, ok, w)
		}
	}
	// Empty: the 61st fits in one second (60 per minute).
	w, ok, tl := q.reserve(clk.Now(), &c, cost, 0)
	if ok || tl || w != time.Second {
		t.Fatalf("61st: ok %v tooLarge %v wait %v, want refused, 1s", ok, tl, w)
	}
	// Within max_wait it is reserved, to be sent a second later.
	if w, ok, _ = q.reserve(clk.Now(), &c, cost, time.Second); !ok || w != time.Second {
		t.Fatalf("61st with 1s max wait: ok %v wait %v", ok, w)
	}
	// The next one waits two seconds.
	if w, ok, _ = q.reserve(clk.Now(), &c, cost, time.Minute); !ok || w != 2*time.Second {
		t.Fatalf("62nd: ok %v wait %v, want 2s", ok, w)
	}
	clk.Advance(30 * time.Second)
	if lv := quotaLevel(t, &q, clk.Now(), DimRequests); lv != 28 {
		t.Fatalf("after 30 s: level %d, want 30 refilled - 2 owed = 28", lv)
	}
	clk.Advance(time.Hour)
	if lv := quotaLevel(t, &q, clk.Now(), DimRequests); lv != 60 {
		t.Fatalf("after an hour: level %d, want full (60)", lv)
	}
	// A refund on a full bucket does not overfill it.
	q.b[DimRequests].Adjust(q.clk.Ticks(clk.Now()), -10)
	if lv := quotaLevel(t, &q, clk.Now(), DimRequests); lv != 60 {
		t.Fatalf("refund on a full bucket: level %d, want 60", lv)
	}
}

// TestQuotaAllOrNothing: a request that fits one dimension but not another
// takes nothing; one larger than a capacity never fits.
func TestQuotaAllOrNothing(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	var q Quota
	q.initQuota(now, now, Limits{Requests: 100, InputTokens: 1000, OutputTokens: 500}, false)
	var c claim
	if _, ok, _ := q.reserve(now, &c, Demand{InputTokens: 900, OutputTokens: 100}.costs(), 0); !ok {
		t.Fatal("first request refused")
	}
	// Input fits no longer (100 left), output would.
	w, ok, tl := q.reserve(now, &c, Demand{InputTokens: 200, OutputTokens: 100}.costs(), 0)
	if ok || tl {
		t.Fatalf("ok %v tooLarge %v", ok, tl)
	}
	if want := 6 * time.Second; w != want { // 100 input tokens at 1000/min
		t.Fatalf("wait %v, want %v", w, want)
	}
	if lr, lo := quotaLevel(t, &q, now, DimRequests), quotaLevel(t, &q, now, DimOutput); lr != 99 || lo != 400 {
		t.Fatalf("refused request took something: requests %d (want 99), output %d (want 400)", lr, lo)
	}
	if _, ok, tl := q.reserve(now, &c, Demand{OutputTokens: 501}.costs(), time.Hour); ok || !tl {
		t.Fatalf("501 output tokens on a 500 capacity: ok %v tooLarge %v, want too large", ok, tl)
	}
}

// TestBucketResizeKeepsUse: a new capacity keeps the tokens in use.
func TestBucketResizeKeepsUse(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	var q Quota
	q.initQuota(now, now, Limits{Tokens: 1000}, false)
	var c claim
	q.reserve(now, &c, Demand{InputTokens: 300}.costs(), 0)
	q.configure(now, Limits{Tokens: 5000})
	if lv := quotaLevel(t, &q, now, DimTokens); lv != 4700 {
		t.Fatalf("grown to 5000 with 300 in use: level %d, want 4700", lv)
	}
	q.configure(now, Limits{Tokens: 200})
	if lv := quotaLevel(t, &q, now, DimTokens); lv != -100 {
		t.Fatalf("shrunk to 200 with 300 in use: level %d, want -100", lv)
	}
	q.settle(now, &c, Usage{Sent: true, InputTokens: 100})
	if lv := quotaLevel(t, &q, now, DimTokens); lv != 100 {
		t.Fatalf("after settling at 100 used: level %d, want 100", lv)
	}
	q.configure(now, Limits{})
	if _, _, ok := q.Level(now, DimTokens); ok {
		t.Fatal("own quota with tpm 0 still limits tokens")
	}
}

// exactKind is one kind of request in the exactness test.
type exactKind int

const (
	exactDone        exactKind = iota // streamed to the end; usage metered
	exactOveruse                      // used more than it reserved
	exactQueueCancel                  // client left before it was sent
	exactMidCancel                    // client left mid-stream
	exactConnectFail                  // connect error, no retry
	exactRetried                      // 503 on one upstream, success on another
	numExactKinds
)

// exactLedger is what every quota must hold at the end of the exactness
// test: what the requests that got in used, by quota and dimension.
type exactLedger struct {
	mu       sync.Mutex
	provider costs
	clients  map[uint64]*costs
	ups      map[*Upstream]*costs
}

func addCosts(dst *costs, c costs) {
	for d := range NumDims {
		dst[d] += c[d]
	}
}

// mirrorUse is what an attempt leaves taken on an upstream's quota: what
// it reserved, or what it used if more, once sent; nothing if not sent.
func mirrorUse(reserved costs, u Usage) costs {
	if !u.Sent {
		return costs{}
	}
	used := u.costs()
	for d := range NumDims {
		used[d] = max(used[d], reserved[d])
	}
	return used
}

// exactRequest runs one request of kind k (already reserved in res) to
// its end and returns what it used and, per attempt, the upstream and
// what it left on its quota.
func exactRequest(t *testing.T, now time.Time, ups *UpstreamSet, res *Reservation, k exactKind, cost costs, used Usage, a1, a2 *Attempt) (Usage, map[*Upstream]costs) {
	att := map[*Upstream]costs{}
	pick := func(a *Attempt, avoid *Upstream) {
		if r := ups.Pick(now, res, nil, avoid, false, a); !r.OK {
			t.Errorf("pick failed: %+v", r)
		}
	}
	finish := func(a *Attempt, r AttemptResult) {
		a.Finish(now, r)
		c := att[a.Upstream()]
		addCosts(&c, mirrorUse(cost, r.Usage))
		att[a.Upstream()] = c
	}
	ok := AttemptResult{Status: 200, Outcome: Outcome{Kind: OutcomeSuccess}, Usage: used}
	switch k {
	case exactDone, exactOveruse:
		pick(a1, nil)
		finish(a1, ok)
	case exactQueueCancel:
		used = Usage{}
	case exactMidCancel:
		used.OutputTokens /= 2
		pick(a1, nil)
		finish(a1, AttemptResult{Failure: AttemptCanceled, Status: 200, Usage: used})
	case exactConnectFail:
		used = Usage{}
		pick(a1, nil)
		finish(a1, AttemptResult{Failure: AttemptConnect})
	case exactRetried:
		pick(a1, nil)
		finish(a1, AttemptResult{Status: 503, Outcome: Outcome{Kind: OutcomeDrop, Drop: control.DropUnavailable}, Usage: Usage{Sent: true}})
		pick(a2, a1.Upstream())
		if a2.Upstream() == a1.Upstream() {
			t.Errorf("retry went back to the failed upstream")
		}
		finish(a2, ok)
	}
	return used, att
}

// TestReserveSettleExact is the rate layer's exactness guarantee: after
// thousands of concurrent requests of every kind (completed, over budget,
// canceled in the queue or mid-stream, failed to connect, retried after a
// 503), refused ones included, every bucket of every quota (the
// provider's, each client key's, each upstream's mirror; requests, tokens,
// input and output) holds exactly its capacity minus what the requests
// that got in used, to the token. Time stands still, so nothing refills.
func TestReserveSettleExact(t *testing.T) {
	t.Parallel()
	clk := newVClock()
	now := clk.Now()
	big := settings.PerMinute{RPM: 1e6, TPM: 1e9, InputTPM: 1e9, OutputTPM: 1e9}
	rs := settings.DefaultRate()
	rs.PerMinute = big
	rs.PerClient.PerMinute = settings.PerMinute{RPM: 200, TPM: 600_000, InputTPM: 400_000, OutputTPM: 300_000}
	rs.PerClient.MaxKeys = 100
	rates := NewRates(rs, clk)
	brk := settings.DefaultBreaker()
	brk.ConsecutiveFailures, brk.FailureRatio = 0, 0
	ups, err := NewUpstreamSet(clk, settings.DefaultLimit(), brk, []settings.Upstream{
		{Name: "a", Weight: 1, Rate: big}, {Name: "b", Weight: 2, Rate: big}}, true)
	if err != nil {
		t.Fatal(err)
	}
	const keys, workers, perWorker = 8, 8, 400
	led := exactLedger{clients: map[uint64]*costs{}, ups: map[*Upstream]*costs{}}
	for k := range uint64(keys) {
		led.clients[k] = &costs{}
	}
	for _, u := range ups.Upstreams() {
		led.ups[u] = &costs{}
	}
	var refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var res Reservation
			var a1, a2 Attempt
			for range perWorker {
				key := uint64(rng.IntN(keys))
				d := Demand{InputTokens: 1 + rng.IntN(2000), OutputTokens: 1 + rng.IntN(1000)}
				if dec := rates.Reserve(now, key, d, ups, 0, &res); dec.Limited || dec.TooLarge {
					refused.Add(1)
					continue
				}
				kind := exactKind(rng.IntN(int(numExactKinds)))
				used := Usage{Sent: true, InputTokens: d.InputTokens, OutputTokens: rng.IntN(d.OutputTokens + 1)}
				if kind == exactOveruse {
					used.OutputTokens = d.OutputTokens + 1 + rng.IntN(500)
				}
				used, att := exactRequest(t, now, ups, &res, kind, d.costs(), used, &a1, &a2)
				res.Settle(now, used)
				led.mu.Lock()
				addCosts(&led.provider, used.costs())
				addCosts(led.clients[key], used.costs())
				for u, c := range att {
					addCosts(led.ups[u], c)
				}
				led.mu.Unlock()
			}
		})
	}
	wg.Wait()
	if refused.Load() == 0 {
		t.Error("no request was refused: the client limits were not exercised")
	}
	check := func(name string, q *Quota, limits Limits, used costs) {
		for d := range NumDims {
			if got, want := quotaLevel(t, q, now, d), limits.of(d)-used[d]; got != want {
				t.Errorf("%s %s: level %d, want %d (capacity %d - used %d)", name, d, got, want, limits.of(d), used[d])
			}
		}
	}
	check("provider", rates.Quota(), OwnLimits(rs), led.provider)
	tab := rates.clients.Load()
	for k := range uint64(keys) {
		e := tab.acquire(now, k)
		check(fmt.Sprintf("client %d", k), &e.q, clientLimits(rs), *led.clients[k])
		tab.release(e)
	}
	for _, u := range ups.Upstreams() {
		check("upstream "+u.Name(), u.Quota(), perMinute(big, 0), *led.ups[u])
		if n := u.inflight.Load(); n != 0 {
			t.Errorf("upstream %s: %d attempts still in flight", u.Name(), n)
		}
	}
	t.Logf("%d requests, %d refused", workers*perWorker, refused.Load())
}
