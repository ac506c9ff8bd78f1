package proxy

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
)

// Defect 5: two providers with the same upstream, ceiling and timeouts each
// get a pool sized for their own ceiling. With one shared pool sized for
// one ceiling, streams that held permits failed with 502 "no free
// connections".
func TestProvidersSharingAnUpstreamHaveTheirOwnPool(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	const ceiling = 8
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = ceiling, ceiling
		p.Timeouts.FirstToken = 300 * time.Millisecond
	})
	second := cfg.Providers[0]
	second.Name, second.Match.PathPrefix = "fake2", "/fake2"
	cfg.Providers = append(cfg.Providers, second)
	s := startSluice(t, cfg)
	c := httpClient()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 2*ceiling; i++ {
		prefix := "/fake"
		if i%2 == 1 {
			prefix = "/fake2"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, c, s.base+prefix+"/v1/chat/completions", map[string]string{"x-events": "8", "x-gap": "100ms"})
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[200] != 2*ceiling {
		t.Fatalf("status codes %v, want %d x 200", codes, 2*ceiling)
	}
	if m := up.maxSeen.Load(); m != 2*ceiling {
		t.Fatalf("upstream saw at most %d in flight, want %d", m, 2*ceiling)
	}
}
