package load

import (
	"math"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Percentiles summarises a set of durations. Values come from an
// HdrHistogram with 1 us resolution and 3 significant figures.
type Percentiles struct {
	N                   int
	Mean, P50, P90, P99 time.Duration
	Max                 time.Duration
}

// PercentilesOf summarises a histogram of durations in microseconds (as
// bench/sim's TTFT and Result.Gaps are kept).
func PercentilesOf(h *hdrhistogram.Histogram) Percentiles {
	if h == nil || h.TotalCount() == 0 {
		return Percentiles{}
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Percentiles{
		N:    int(h.TotalCount()),
		Mean: time.Duration(h.Mean() * float64(time.Microsecond)),
		P50:  us(h.ValueAtQuantile(50)),
		P90:  us(h.ValueAtQuantile(90)),
		P99:  us(h.ValueAtQuantile(99)),
		Max:  us(h.Max()),
	}
}

// recordDuration records d in h, in microseconds, clamped to h's range.
func recordDuration(h *hdrhistogram.Histogram, d time.Duration) {
	_ = h.RecordValue(min(max(1, d.Microseconds()), h.HighestTrackableValue()))
}

// Summary is the outcome of a run. Its counts and latencies are of
// attempts (requests sent; with an SDK a call may send several); Calls
// summarises the calls. Cut requests (still running at the end) are
// counted in Cut only.
type Summary struct {
	// Requests counts requests that ended within the run (Cut excluded).
	Requests         int
	OK               int
	RejectedSluice   int
	RejectedUpstream int
	Failed           int
	Cut              int
	// Retries counts requests that were an SDK's retries (Record.Retry >
	// 0), Cut excluded.
	Retries int
	// Rejected counts RejectedSluice requests by Sluice's reason
	// (X-Sluice-Rejected).
	Rejected map[string]int
	// RetryAfter is the wait asked by refusals that named one (Sluice's
	// or the provider's: Record.RetryAfter).
	RetryAfter Percentiles
	// Reasons counts Failed requests by Reason (or by status when empty).
	Reasons map[string]int
	// Tokens is the output tokens of OK requests (goodput).
	Tokens int
	// Elapsed is the length of the period summarised.
	Elapsed time.Duration
	// OKPerSecond and TokensPerSecond are OK and Tokens over Elapsed.
	OKPerSecond, TokensPerSecond float64
	// Latencies of OK requests: response headers, first token (streams),
	// whole response; ITL is every gap between consecutive tokens of OK
	// streams (or their per-request mean when summarising records alone).
	TTFB, TTFT, Total, ITL Percentiles
	// Calls summarises the calls (logical requests); zero when
	// summarising records alone.
	Calls CallSummary
	// Tenants has one entry per tenant (Config.Tenants), in order; nil
	// without tenants.
	Tenants []TenantSummary `json:",omitempty"`
}

// TenantSummary is one tenant's share of a run (Cut excluded).
type TenantSummary struct {
	// Key is the tenant's API key (TenantKey).
	Key string
	// Calls, OK and Failed count its calls; Tokens the output tokens of
	// its OK calls.
	Calls, OK, Failed, Tokens int
	// Requests counts the requests it sent, RejectedSluice those of them
	// Sluice refused.
	Requests, RejectedSluice int
}

// CallSummary is what the calling code saw: one entry per call, whatever
// number of attempts it took. Cut calls are counted in Cut only.
type CallSummary struct {
	// Calls counts calls that ended within the run (Cut excluded): OK
	// ones and Failed ones, which ended without an answer after whatever
	// retries the SDK made.
	Calls, OK, Failed, Cut int
	// Retried counts calls (Cut excluded) that sent more than one request;
	// OKAfterRetry those of them that ended OK.
	Retried, OKAfterRetry int
	// Attempts counts calls (Cut excluded) by their number of attempts.
	Attempts map[int]int
	// Stops counts Failed calls by why no further attempt was made
	// (Call.Stop), and FailedBy by their last attempt's outcome
	// (rejected_sluice, rejected_upstream, failed).
	Stops, FailedBy map[string]int
	// Backoff is the time calls (Cut included) spent waiting between
	// attempts, summed.
	Backoff time.Duration
	// Latencies of OK calls from their start, backoffs and earlier
	// attempts included: first token (streams) and whole call.
	TTFT, Total Percentiles
}

// Summary summarises the whole run, with ITL from every token gap.
func (r *Result) Summary() Summary {
	s := Summarize(r.Records, r.Elapsed)
	if r.Gaps != nil && r.Gaps.TotalCount() > 0 {
		s.ITL = PercentilesOf(r.Gaps)
	}
	s.Calls = SummarizeCalls(r.Calls)
	if r.Tenants > 0 {
		s.Tenants = make([]TenantSummary, r.Tenants)
		for k := range s.Tenants {
			s.Tenants[k].Key = TenantKey(k)
		}
		at := func(k int) *TenantSummary { return &s.Tenants[min(max(k, 0), r.Tenants-1)] }
		for i := range r.Calls {
			c := &r.Calls[i]
			if c.Outcome == Cut {
				continue
			}
			t := at(c.Tenant)
			t.Calls++
			if c.Outcome == OK {
				t.OK++
				t.Tokens += c.Tokens
			} else {
				t.Failed++
			}
		}
		for i := range r.Records {
			rec := &r.Records[i]
			if rec.Outcome == Cut {
				continue
			}
			t := at(rec.Tenant)
			t.Requests++
			if rec.Outcome == RejectedSluice {
				t.RejectedSluice++
			}
		}
	}
	return s
}

// SummarizeCalls summarises calls.
func SummarizeCalls(calls []Call) CallSummary {
	s := CallSummary{Attempts: map[int]int{}, Stops: map[string]int{}, FailedBy: map[string]int{}}
	ttft, total := newHist(), newHist()
	for i := range calls {
		c := &calls[i]
		s.Backoff += c.Backoff
		if c.Outcome == Cut {
			s.Cut++
			continue
		}
		s.Calls++
		s.Attempts[c.Attempts]++
		if c.Attempts > 1 {
			s.Retried++
		}
		if c.Outcome != OK {
			s.Failed++
			s.Stops[c.Stop]++
			s.FailedBy[c.Outcome.String()]++
			continue
		}
		s.OK++
		if c.Attempts > 1 {
			s.OKAfterRetry++
		}
		recordDuration(total, c.Total)
		if c.TTFT > 0 {
			recordDuration(ttft, c.TTFT)
		}
	}
	s.TTFT, s.Total = PercentilesOf(ttft), PercentilesOf(total)
	return s
}

// Summarize summarises records over a period of length elapsed. ITL is
// taken from each OK stream's mean inter-token latency.
func Summarize(recs []Record, elapsed time.Duration) Summary {
	s := Summary{Elapsed: elapsed, Rejected: map[string]int{}, Reasons: map[string]int{}}
	ttfb, ttft, total, itl, ra := newHist(), newHist(), newHist(), newHist(), newHist()
	rec := recordDuration
	for i := range recs {
		r := &recs[i]
		if r.Outcome == Cut {
			s.Cut++
			continue
		}
		s.Requests++
		if r.RetryAfter > 0 {
			rec(ra, r.RetryAfter)
		}
		if r.Retry > 0 {
			s.Retries++
		}
		switch r.Outcome {
		case OK:
			s.OK++
			s.Tokens += r.Tokens
			rec(ttfb, r.TTFB)
			rec(total, r.Total)
			if r.TTFT > 0 {
				rec(ttft, r.TTFT)
			}
			if d := r.ITL(); d > 0 {
				rec(itl, d)
			}
		case RejectedSluice:
			s.RejectedSluice++
			s.Rejected[r.Reason]++
		case RejectedUpstream:
			s.RejectedUpstream++
		default:
			s.Failed++
			reason := r.Reason
			if reason == "" {
				reason = "status " + strconv.Itoa(r.Status)
			}
			s.Reasons[reason]++
		}
	}
	if sec := elapsed.Seconds(); sec > 0 {
		s.OKPerSecond = float64(s.OK) / sec
		s.TokensPerSecond = float64(s.Tokens) / sec
	}
	s.TTFB, s.TTFT, s.Total, s.ITL = PercentilesOf(ttfb), PercentilesOf(ttft), PercentilesOf(total), PercentilesOf(itl)
	s.RetryAfter = PercentilesOf(ra)
	return s
}

// Bucket is one interval of a time series.
type Bucket struct {
	// Start is the start of the interval, since the start of the run.
	Start time.Duration
	// Started counts requests sent in the interval; the outcome counts
	// count requests that ended in it (Cut excluded).
	Started, OK, RejectedSluice, RejectedUpstream, Failed int
	// Tokens is the output tokens of requests that ended OK in the interval.
	Tokens int
	// InFlight is the number of requests in progress at the interval's end.
	InFlight int
	// TTFTP50 and TTFTP99 are over streams whose first token arrived in the
	// interval (whatever their outcome); NaN-free: 0 when there was none.
	TTFTP50, TTFTP99 time.Duration
	// TTFTCount is how many first tokens arrived in the interval.
	TTFTCount int
}

// Series cuts the run into intervals of width (the last may be partial).
func (r *Result) Series(width time.Duration) []Bucket {
	return SeriesOf(r.Records, r.Elapsed, width)
}

// SeriesOf is Series over any records.
func SeriesOf(recs []Record, elapsed, width time.Duration) []Bucket {
	if width <= 0 || elapsed <= 0 {
		return nil
	}
	n := int(math.Ceil(float64(elapsed) / float64(width)))
	out := make([]Bucket, n)
	ttfts := make([][]time.Duration, n)
	idx := func(t time.Duration) int { return min(max(int(t/width), 0), n-1) }
	delta := make([]int, n+1) // in-flight changes at bucket ends
	for i := range out {
		out[i].Start = time.Duration(i) * width
	}
	for i := range recs {
		r := &recs[i]
		b := idx(r.Start)
		out[b].Started++
		if r.TTFT > 0 {
			t := idx(r.Start + r.TTFT)
			ttfts[t] = append(ttfts[t], r.TTFT)
		}
		e := idx(r.End())
		// In flight at the end of bucket k: started in or before k and
		// ended after k.
		delta[b]++
		delta[e]--
		switch r.Outcome {
		case OK:
			out[e].OK++
			out[e].Tokens += r.Tokens
		case RejectedSluice:
			out[e].RejectedSluice++
		case RejectedUpstream:
			out[e].RejectedUpstream++
		case Failed:
			out[e].Failed++
		case Cut:
			delta[e]++ // still running at the end
			delta[n]--
		}
	}
	inflight := 0
	h := newHist() // reused: one bucket at a time
	for i := range out {
		inflight += delta[i]
		out[i].InFlight = inflight
		if t := ttfts[i]; len(t) > 0 {
			h.Reset()
			for _, d := range t {
				recordDuration(h, d)
			}
			p := PercentilesOf(h)
			out[i].TTFTCount, out[i].TTFTP50, out[i].TTFTP99 = p.N, p.P50, p.P99
		}
	}
	return out
}
