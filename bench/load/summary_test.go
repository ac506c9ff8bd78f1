package load

import (
	"testing"
	"time"
)

// TestSummaryCounts builds a run by hand, three calls of one tenant and
// two of another, and checks both views of the summary.
func TestSummaryCounts(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	res := &Result{
		Elapsed: time.Second,
		Tenants: 2,
		Records: []Record{
			// Call A (tenant 0): refused twice by Sluice, then OK.
			{Start: 0, Retry: 0, Tenant: 0, Outcome: RejectedSluice, Status: 503, Reason: "queue_full", RetryAfter: 100 * ms, Total: ms},
			{Start: 101 * ms, Retry: 1, Tenant: 0, Outcome: RejectedSluice, Status: 503, Reason: "displaced", RetryAfter: 300 * ms, Total: ms},
			{Start: 402 * ms, Retry: 2, Tenant: 0, Outcome: OK, Status: 200, TTFB: 5 * ms, TTFT: 10 * ms, LastToken: 30 * ms, Total: 40 * ms, Tokens: 3},
			// Call B (tenant 1): the provider's 429 three times.
			{Start: 0, Retry: 0, Tenant: 1, Outcome: RejectedUpstream, Status: 429, Total: ms},
			{Start: 500 * ms, Retry: 1, Tenant: 1, Outcome: RejectedUpstream, Status: 429, Total: ms},
			{Start: 900 * ms, Retry: 2, Tenant: 1, Outcome: RejectedUpstream, Status: 429, Total: ms},
			// Call C (tenant 0): OK at once.
			{Start: 10 * ms, Tenant: 0, Outcome: OK, Status: 200, TTFB: 2 * ms, TTFT: 20 * ms, LastToken: 20 * ms, Total: 25 * ms, Tokens: 1},
			// Call D (tenant 0): a 400, not retried.
			{Start: 20 * ms, Tenant: 0, Outcome: Failed, Status: 400, Total: ms},
			// Call E (tenant 1): refused, then cut in its backoff.
			{Start: 950 * ms, Tenant: 1, Outcome: RejectedSluice, Status: 503, Reason: "queue_full", Total: ms},
		},
		Calls: []Call{
			{Start: 0, Tenant: 0, Outcome: OK, Stop: StopOK, Attempts: 3, Backoff: 400 * ms, Total: 442 * ms, TTFT: 412 * ms, Tokens: 3},
			{Start: 0, Tenant: 1, Outcome: RejectedUpstream, Stop: StopExhausted, Attempts: 3, Backoff: 850 * ms, Total: 901 * ms},
			{Start: 10 * ms, Tenant: 0, Outcome: OK, Stop: StopOK, Attempts: 1, Total: 25 * ms, TTFT: 20 * ms, Tokens: 1},
			{Start: 20 * ms, Tenant: 0, Outcome: Failed, Stop: StopNotRetryable, Attempts: 1, Total: ms},
			{Start: 950 * ms, Tenant: 1, Outcome: Cut, Stop: StopCut, Attempts: 1, Backoff: 49 * ms, Total: 50 * ms},
		},
	}
	s := res.Summary()
	if s.Requests != 9 || s.OK != 2 || s.RejectedSluice != 3 || s.RejectedUpstream != 3 || s.Failed != 1 || s.Cut != 0 || s.Retries != 4 {
		t.Errorf("requests: %+v", s)
	}
	if s.Rejected["queue_full"] != 2 || s.Rejected["displaced"] != 1 || s.Reasons["status 400"] != 1 {
		t.Errorf("reasons: rejected %v, failed %v", s.Rejected, s.Reasons)
	}
	if p := s.RetryAfter; p.N != 2 || p.Max < 300*ms || p.P50 < 100*ms || p.P50 > 101*ms {
		t.Errorf("retry after %+v", p)
	}
	c := s.Calls
	if c.Calls != 4 || c.OK != 2 || c.Failed != 2 || c.Cut != 1 || c.Retried != 2 || c.OKAfterRetry != 1 {
		t.Errorf("calls: %+v", c)
	}
	if c.Attempts[1] != 2 || c.Attempts[3] != 2 || len(c.Attempts) != 2 {
		t.Errorf("calls by attempts: %v", c.Attempts)
	}
	if c.Stops[StopExhausted] != 1 || c.Stops[StopNotRetryable] != 1 || c.FailedBy["rejected_upstream"] != 1 || c.FailedBy["failed"] != 1 {
		t.Errorf("stops %v, failed by %v", c.Stops, c.FailedBy)
	}
	if c.Backoff != 1299*ms || c.Total.N != 2 || c.Total.Max < 442*ms || c.TTFT.N != 2 || c.TTFT.Max < 412*ms {
		t.Errorf("backoff %v, total %+v, ttft %+v", c.Backoff, c.Total, c.TTFT)
	}
	want := []TenantSummary{
		{Key: "sk-tenant-0", Calls: 3, OK: 2, Failed: 1, Tokens: 4, Requests: 5, RejectedSluice: 2},
		{Key: "sk-tenant-1", Calls: 1, OK: 0, Failed: 1, Tokens: 0, Requests: 4, RejectedSluice: 1},
	}
	if len(s.Tenants) != 2 || s.Tenants[0] != want[0] || s.Tenants[1] != want[1] {
		t.Errorf("tenants %+v, want %+v", s.Tenants, want)
	}
	// Records alone: no calls, no tenants.
	if r := Summarize(res.Records, time.Second); r.Calls.Calls != 0 || r.Tenants != nil || r.Requests != 9 {
		t.Errorf("records alone: %+v", r)
	}
}
