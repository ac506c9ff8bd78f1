package proxy

import (
	"io"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// The classification table end to end: a storm of 429 insufficient_quota
// (billing, not congestion) leaves the limit alone; a storm of 429
// rate_limit_exceeded cuts it; upstream 429s are relayed unchanged, not
// marked as Sluice's. A billing error opens the upstream's breaker at
// once: after the first, the provider (one upstream) is answered by
// Sluice, 503 no_upstream with a Retry-After of the breaker's
// quota_open_time, without sending.
func TestQuotaStormDoesNotCollapseLimit(t *testing.T) {
	for _, tc := range []struct {
		name     string
		quota    string
		wantDrop bool
	}{
		{"insufficient_quota", "1", false},
		{"rate_limit_exceeded", "0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newFakeUpstream(t)
			s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
				p.Limit.Algorithm = settings.AlgorithmAIMD
				p.Limit.Ceiling, p.Limit.Initial, p.Limit.Min = 20, 10, 1
				p.Limit.Cooldown = 0
			}))
			c := httpClient()
			lim := s.srv.limiters.Limiter("fake")
			before := lim.Stats().Limit
			for i := 0; i < 30; i++ {
				resp := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-status": "429", "x-quota": tc.quota})
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if !tc.wantDrop && i > 0 {
					if resp.StatusCode != 503 || resp.Header.Get(HeaderRejected) != "no_upstream" || resp.Header.Get("Retry-After") != "300" {
						t.Fatalf("after a billing error: %d, %s=%q, Retry-After %q; want 503 no_upstream, 300", resp.StatusCode,
							HeaderRejected, resp.Header.Get(HeaderRejected), resp.Header.Get("Retry-After"))
					}
					continue
				}
				if resp.StatusCode != 429 || resp.Header.Get(HeaderRejected) != "" {
					t.Fatalf("upstream 429 relayed as %d, %s=%q", resp.StatusCode, HeaderRejected, resp.Header.Get(HeaderRejected))
				}
			}
			if !tc.wantDrop && up.requests.Load() != 1 {
				t.Errorf("upstream saw %d requests, want 1 (the breaker opened on the billing error)", up.requests.Load())
			}
			testutil.Eventually(t, "permits released", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 })
			after := lim.Stats().Limit
			if tc.wantDrop && after >= before {
				t.Fatalf("rate-limit storm: limit %d -> %d, want a cut", before, after)
			}
			if !tc.wantDrop && after != before {
				t.Fatalf("quota storm: limit %d -> %d, want unchanged", before, after)
			}
		})
	}
}
