package proxy

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// An upstream 429 with "Retry-After: 999999999" (the audit's case) freezes
// the provider's limit growth for control.MaxRetryAfter, not for decades;
// the client still gets the provider's answer, Retry-After included.
func TestUpstreamRetryAfterCapped(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	u := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Algorithm = settings.AlgorithmAIMD
		p.Limit.Ceiling, p.Limit.Initial, p.Limit.Min = 20, 10, 1
	}))
	before := time.Now()
	resp := post(t, httpClient(), u.base+"/fake/v1/chat/completions", map[string]string{"x-status": "429", "x-retry-after": "999999999"})
	resp.Body.Close()
	after := time.Now()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "999999999" {
		t.Fatalf("client got %d Retry-After %q, want the provider's 429 relayed", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	frozen := u.srv.Providers()[0].Limiter.Controller.FrozenUntil
	if frozen.Before(before.Add(control.MaxRetryAfter-time.Second)) || frozen.After(after.Add(control.MaxRetryAfter)) {
		t.Fatalf("growth frozen until %v, want about now + %v", frozen, control.MaxRetryAfter)
	}
}
