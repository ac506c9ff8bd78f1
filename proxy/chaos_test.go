package proxy

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// TestChaosNoLeaks sends 10,000 requests (2,000 with -short) through Sluice
// while clients disconnect at random, the upstream resets streams, stalls
// past the idle timeout, misses the first-token deadline and answers 429.
// Afterwards no permit is in use, nobody waits, the upstream has nothing in
// flight and (TestMain) no goroutine leaked. (The upstream's in-flight
// ceiling is asserted without disconnects in TestCeilingHoldsUnder500Clients:
// here the fake notices a closed connection a few ms late.)
func TestChaosNoLeaks(t *testing.T) {
	total := 10000
	if testing.Short() {
		total = 2000
	}
	up := newFakeUpstream(t)
	const ceiling = 16
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = ceiling, ceiling
		p.Queue.MaxWaiting, p.Queue.MaxWait = 64, 300*time.Millisecond
		p.Timeouts.FirstToken = 150 * time.Millisecond
		p.Timeouts.Idle = 100 * time.Millisecond
		p.Timeouts.Total = 5 * time.Second
	}))
	c := httpClient()
	var next atomic.Int64
	var mu sync.Mutex
	outcomes := map[string]int{}
	var wg sync.WaitGroup
	for w := 0; w < 48; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 7))
			for next.Add(1) <= int64(total) {
				hdr := map[string]string{}
				mode := r.IntN(8)
				switch mode {
				case 0, 1: // a short stream
					hdr["x-events"], hdr["x-gap"] = "3", "0s"
				case 2:
					hdr["x-json"] = "1"
				case 3: // upstream dies mid-stream
					hdr["x-events"], hdr["x-die-after"] = "4", "1"
				case 4: // misses the first-token deadline
					hdr["x-ttft"] = "400ms"
					if r.IntN(2) == 0 {
						hdr["x-headers-late"] = "1"
					}
				case 5: // stalls longer than the idle timeout
					hdr["x-events"], hdr["x-gap"] = "3", "300ms"
				case 6:
					hdr["x-status"] = "429"
				case 7: // a long stream the client abandons
					hdr["x-events"], hdr["x-gap"] = "50", "5ms"
				}
				ctx, cancel := context.WithCancel(context.Background())
				if r.IntN(4) == 0 || mode == 7 {
					time.AfterFunc(time.Duration(r.IntN(40))*time.Millisecond, cancel)
				}
				req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/fake/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				key := "client-canceled"
				resp, err := c.Do(req)
				if err == nil {
					_, rerr := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					key = http.StatusText(resp.StatusCode)
					if rerr != nil {
						key += " (truncated)"
					}
				}
				cancel()
				mu.Lock()
				outcomes[key]++
				mu.Unlock()
			}
		}(uint64(w))
	}
	wg.Wait()
	lim := s.srv.limiters.Limiter("fake")
	testutil.Eventually(t, "permits and queue back to 0", 5*time.Second, func() bool {
		st := lim.Stats()
		return st.Inflight == 0 && st.Waiting == 0 && st.Decoding == 0 && s.srv.Live() == 0
	})
	testutil.Eventually(t, "upstream idle", 5*time.Second, func() bool { return up.inflight.Load() == 0 })
	t.Logf("outcomes: %v; upstream max in flight %d", outcomes, up.maxSeen.Load())
	c.CloseIdleConnections()
}
