package adaptive

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/feedback"
	"github.com/sluicehq/sluice/settings"
)

// Benchmarks of the rate layer's per-request path. Run with
//
//	go test -run NONE -bench 'Rate|Bucket|Pick|Breaker|RetryDecide|Learn' -benchmem ./adaptive/
//
// Limits are large enough never to refuse: these measure the admitted
// path, which every request takes.

var bigLimits = settings.PerMinute{RPM: 1e8, TPM: 1e10, InputTPM: 1e10, OutputTPM: 1e10}

func benchRates(b *testing.B, perClient bool) (*Rates, *UpstreamSet) {
	b.Helper()
	rs := settings.DefaultRate()
	rs.PerMinute = bigLimits
	if perClient {
		rs.PerClient.PerMinute = bigLimits
	}
	r := NewRates(rs, nil)
	ups, err := NewUpstreamSet(nil, settings.DefaultLimit(), settings.DefaultBreaker(),
		[]settings.Upstream{{Name: "a", Weight: 1, Rate: bigLimits}, {Name: "b", Weight: 1, Rate: bigLimits}}, true)
	if err != nil {
		b.Fatal(err)
	}
	return r, ups
}

// BenchmarkRateRequest is one request through the whole rate layer:
// reserve on the provider's, the client's and an upstream's quota (four
// dimensions each), pick the upstream, finish the attempt, settle.
func BenchmarkRateRequest(b *testing.B) {
	r, ups := benchRates(b, true)
	var key atomic.Uint64
	d := Demand{InputTokens: 800, OutputTokens: 400}
	u := Usage{Sent: true, InputTokens: 800, OutputTokens: 250}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		k := key.Add(1) // a client per goroutine
		var res Reservation
		var a Attempt
		for pb.Next() {
			now := time.Now()
			if dec := r.Reserve(now, k, d, ups, 0, &res); dec.Limited || dec.TooLarge {
				b.Fatal("refused")
			}
			if p := ups.Pick(now, &res, nil, nil, false, &a); !p.OK {
				b.Fatal("no upstream")
			}
			a.Finish(now, AttemptResult{Status: 200, Outcome: Outcome{Kind: OutcomeIgnore}, Usage: u})
			res.Settle(now, u)
		}
	})
}

// BenchmarkRateRequestDefault is the same with the defaults: no rate
// configured, one upstream whose quota follows the provider's headers
// (none seen yet). Every request of a provider pays this.
func BenchmarkRateRequestDefault(b *testing.B) {
	r := NewRates(settings.DefaultRate(), nil)
	ups, err := NewUpstreamSet(nil, settings.DefaultLimit(), settings.DefaultBreaker(), []settings.Upstream{settings.DefaultUpstream()}, true)
	if err != nil {
		b.Fatal(err)
	}
	d := Demand{InputTokens: 800, OutputTokens: 400}
	u := Usage{Sent: true, InputTokens: 800, OutputTokens: 250}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var res Reservation
		var a Attempt
		for pb.Next() {
			now := time.Now()
			r.Reserve(now, 0, d, ups, 0, &res)
			ups.Pick(now, &res, nil, nil, false, &a)
			a.Finish(now, AttemptResult{Status: 200, Outcome: Outcome{Kind: OutcomeIgnore}, Usage: u})
			res.Settle(now, u)
		}
	})
}

// BenchmarkRateReserveSettle is the provider's own quota alone: reserve
// and settle on four dimensions.
func BenchmarkRateReserveSettle(b *testing.B) {
	r, _ := benchRates(b, false)
	d := Demand{InputTokens: 800, OutputTokens: 400}
	u := Usage{Sent: true, InputTokens: 800, OutputTokens: 250}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var res Reservation
		for pb.Next() {
			now := time.Now()
			r.Reserve(now, 0, d, nil, 0, &res)
			res.Settle(now, u)
		}
	})
}

// BenchmarkBucketReserve is one bucket's reserve and refund.
func BenchmarkBucketReserve(b *testing.B) {
	var q Quota
	now := time.Now()
	q.initQuota(now, now, Limits{Tokens: 1e10}, false)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			nt := q.clk.Ticks(time.Now())
			q.b[DimTokens].Reserve(nt, 1000, 0)
			q.b[DimTokens].Adjust(nt, -1000)
		}
	})
}

// BenchmarkPick is the upstream choice among two, with its attempt's
// finish.
func BenchmarkPick(b *testing.B) {
	_, ups := benchRates(b, false)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var a Attempt
		for pb.Next() {
			now := time.Now()
			ups.Pick(now, nil, nil, nil, false, &a)
			a.Finish(now, AttemptResult{Status: 200, Usage: Usage{Sent: true}})
		}
	})
}

// BenchmarkBreakerAllowRecord is a closed breaker's pass and success.
func BenchmarkBreakerAllowRecord(b *testing.B) {
	br := newBreaker(settings.DefaultBreaker())
	r := AttemptResult{Status: 200}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := time.Now()
			t, _ := br.Allow(now)
			br.Record(now, t, r)
		}
	})
}

// BenchmarkRetryDecide is a retryable failure's decision.
func BenchmarkRetryDecide(b *testing.B) {
	s := settings.DefaultRetries()
	s.MinPerSecond = 10000
	p := NewRetryPolicy(s, nil)
	r := AttemptResult{Status: 503, Class: feedback.ErrUnavailable}
	c := RetryContext{Attempts: 1, Alternatives: true}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			now := time.Now()
			p.Request(now)
			p.Decide(now, r, c)
		}
	})
}

// BenchmarkLearn applies a response's OpenAI rate-limit headers to an
// upstream's quota (parsing excluded: see feedback's benchmark).
func BenchmarkLearn(b *testing.B) {
	r, ups := benchRates(b, false)
	rl := openAIHeaders(1e8, 1e8-10, 1e10, 1e10-5000, 30*time.Millisecond)
	d := Demand{InputTokens: 800, OutputTokens: 400}
	b.ReportAllocs()
	var res Reservation
	var a Attempt
	for b.Loop() {
		now := time.Now()
		r.Reserve(now, 0, d, ups, 0, &res)
		ups.Pick(now, &res, nil, nil, false, &a)
		a.Learn(now, 200, feedback.ErrNone, rl, 0)
		a.Finish(now, AttemptResult{Status: 200, Usage: Usage{Sent: true}})
		res.Settle(now, Usage{Sent: true})
	}
}

// BenchmarkDefaultProviderRequest is what the request path asks of a
// provider with the defaults (no rate: configured, one upstream:, no rate
// limits reported by the provider) for one answered request, next to what
// the permit alone costs: "permit" is TryAcquire and Finish; "stack" adds
// Rates.Needed (false: no reservation), the pick of the one upstream and
// the attempt's Finish. Both feed the controller its Answered sample.
func BenchmarkDefaultProviderRequest(b *testing.B) {
	for _, name := range []string{"permit", "stack"} {
		b.Run(name, func(b *testing.B) {
			r := NewRegistry(nil)
			provs, err := r.ReconcileProviders(map[string]ProviderSettings{"p": DefaultProviderSettings(settingsFor(settings.AlgorithmGradient2, 1000))})
			if err != nil {
				b.Fatal(err)
			}
			p := provs["p"]
			stack := name == "stack"
			ok := Outcome{Kind: OutcomeSuccess}
			res := AttemptResult{Status: 200, Outcome: ok, Usage: Usage{Sent: true, InputTokens: 800, OutputTokens: 250}}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var permit Permit
				var a Attempt
				for pb.Next() {
					now := time.Now()
					if stack && p.Rates.Needed(p.Upstreams) {
						b.Fatal("rate layer needed with nothing configured")
					}
					if !p.Limiter.TryAcquire(now, Flow{}, &permit) {
						b.Fatal("refused")
					}
					if stack {
						if pr := p.Upstreams.Pick(now, nil, &permit, nil, false, &a); !pr.OK {
							b.Fatal("no upstream")
						}
						a.Finish(now, res)
					}
					permit.Finish(now, ok)
				}
			})
		})
	}
}
