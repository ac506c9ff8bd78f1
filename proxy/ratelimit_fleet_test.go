package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
)

// fleetRates joins the provider's own rate limit of s to a fleet played
// by the test: the pools start empty, and when grant is true every wake-up
// is answered with what the pools ask for (as the coordinator does from
// Redis).
func fleetRates(t *testing.T, s *sluiceUnderTest, grant bool) *adaptive.Rates {
	t.Helper()
	rates := s.srv.snap.Load().providers[0].adm.Rates
	wake := make(chan struct{}, 1)
	rates.JoinFleet(wake, 1, 20*time.Millisecond)
	rates.FleetApply(time.Now(), rates.FleetPlan(1)) // leased, nothing granted
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-wake:
				plan := rates.FleetPlan(1)
				for i := range plan {
					if grant {
						plan[i].Granted = plan[i].Want
					}
				}
				rates.FleetApply(time.Now(), plan)
			}
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return rates
}

// A request this replica's pool of a fleet-wide rate cannot cover is not
// refused at once: the refusal woke the coordinator, and the request is
// tried again after a short wait, within max_wait. When the fleet has
// nothing to lease, it is refused once max_wait is spent, as a local
// rate limit would.
func TestFleetPoolRefusalRetriedWithinMaxWait(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.Rate.RPM = 600
		p.Queue.MaxWait = 300 * time.Millisecond
	})
	s := startSluiceWith(t, cfg, Options{})
	fleetRates(t, s, true)
	resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", nil)
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d (%s), want 200 once the pool was refilled", resp.StatusCode, resp.Header.Get(HeaderRejected))
	}
	st := s.srv.Providers()[0].Rates
	if st.PoolShort == 0 || st.Limited[adaptive.ScopeProvider] != 0 || !st.Leased {
		t.Errorf("rate stats %+v: want a pool refusal, retried, no 429", st)
	}

	s2 := startSluiceWith(t, cfg, Options{})
	fleetRates(t, s2, false)
	start := time.Now()
	resp = post(t, httpClient(), s2.base+"/fake/v1/chat/completions", nil)
	readAll(t, resp)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(HeaderRejected) != "rate_limit_provider" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d %s=%q Retry-After %q; want 429 rate_limit_provider with a Retry-After", resp.StatusCode,
			HeaderRejected, resp.Header.Get(HeaderRejected), resp.Header.Get("Retry-After"))
	}
	// Tried again while the next try fitted in max_wait (every Retry-After,
	// here the fleet's refill of one request: 100 ms), then refused.
	if waited, short := time.Since(start), s2.srv.Providers()[0].Rates.PoolShort; waited < 200*time.Millisecond || short < 3 {
		t.Errorf("refused after %s and %d pool refusals, want tries 100 ms apart within max_wait (300ms)", waited, short)
	}
	if got := up.requests.Load(); got != 1 {
		t.Errorf("upstream saw %d requests, want the 1 the fleet granted", got)
	}
}
