package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// paceController makes c pace dispatches at about 3 a second, as a provider
// with a request-rate limit would: three requests accepted at 15 in
// flight, a refusal at 15, one accepted at 15 again (so the refusal was
// not about concurrency), then a refusal at 12. With a cool-down of 1 s,
// the accepted rate is 3 over (at least) a second.
func paceController(t *testing.T, c control.Controller) {
	t.Helper()
	now := time.Now
	first := func() {
		c.Observe(control.Sample{Kind: control.FirstToken, Now: now(), Dispatched: now(), InflightAtDispatch: 15, TTFT: 100 * time.Millisecond})
	}
	drop := func(n int) {
		c.Observe(control.Sample{Kind: control.Dropped, Now: now(), Dispatched: now(), InflightAtDispatch: n, Drop: control.DropRateLimit})
	}
	first()
	first()
	drop(15)
	first()
	drop(12)
	if p := c.State().Pace; p < 2.5 || p > 3.5 {
		t.Fatalf("pace %.2f/s, want about 3", p)
	}
}

// TestPacedDispatches: once the provider's refusals call for pacing,
// requests that arrive together reach the upstream one pace apart, each
// holding its permit while it waits; a client that leaves while its
// request waits for its slot frees its permit, once, and the upstream
// never sees that request. The attempt's clock (TTFT, the first-token
// deadline) starts at the dispatch, not at the permit: the third stream
// waits about 0.67 s for its slot, longer than its first_token of 0.5 s,
// and is served.
func TestPacedDispatches(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Algorithm = settings.AlgorithmAIMD
		p.Limit.Ceiling, p.Limit.Initial = 20, 20
		p.Limit.Cooldown = time.Second
		p.Timeouts.FirstToken = 500 * time.Millisecond
	}))
	lim := s.srv.limiters.Limiter("fake")
	paceController(t, lim.Controller())

	c := httpClient()
	var codes []int
	var bodies []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		codes, bodies = postTogether(c, s.base+"/fake/v1/chat/completions", 3, map[string]string{"x-events": "2"})
	}()
	// A fourth client leaves while its request waits for its slot.
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		time.Sleep(50 * time.Millisecond) // after the three took their slots
		req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/fake/v1/chat/completions", strings.NewReader(`{}`))
		req.Header.Set("x-json", "1")
		r, err := c.Do(req)
		if err == nil {
			r.Body.Close()
		}
		gone <- err
	}()
	time.Sleep(300 * time.Millisecond)
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("the leaving client got an answer")
	}
	<-done
	for i, code := range codes {
		if code != 200 || !strings.Contains(bodies[i], "[DONE]") {
			t.Fatalf("stream %d: status %d, body %q", i, code, bodies[i])
		}
	}
	testutil.Eventually(t, "permits freed", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 })
	time.Sleep(1200 * time.Millisecond) // the leaving request's slot has passed
	up.mu.Lock()
	arr := append([]time.Time(nil), up.arrivals...)
	up.mu.Unlock()
	if len(arr) != 3 {
		t.Fatalf("upstream saw %d requests, want 3 (the fourth client left while waiting)", len(arr))
	}
	// Unpaced, the three would arrive within milliseconds; paced, their
	// slots are a third of a second apart. The bound leaves room for one
	// request's trip to the upstream being late on a loaded machine (the
	// gap is measured where the upstream sees them, not at the slot).
	for i := 1; i < len(arr); i++ {
		if d := arr[i].Sub(arr[i-1]); d < 150*time.Millisecond {
			t.Fatalf("requests %d and %d reached the upstream %v apart, want about a third of a second", i-1, i, d)
		}
	}
	if d := arr[len(arr)-1].Sub(arr[0]); d < 500*time.Millisecond {
		t.Fatalf("the three requests reached the upstream within %v, want two slots of a third of a second", d)
	}
	if st := lim.Stats(); st.Inflight != 0 || st.Waiting != 0 {
		t.Fatalf("in flight %d, waiting %d at the end", st.Inflight, st.Waiting)
	}
}

// postBody posts a streaming chat request with headers hdr and returns the
// status and body (0 and the error on failure). Safe to call from any
// goroutine.
func postBody(c *http.Client, url string, hdr map[string]string) (int, string) {
	r, err := c.Do(chatRequest(url, hdr))
	if err != nil {
		return 0, err.Error()
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if ra := r.Header.Get("Retry-After"); ra != "" {
		return r.StatusCode, r.Header.Get(HeaderRejected) + " retry-after=" + ra + " " + string(b)
	}
	return r.StatusCode, string(b)
}

// TestPaceSlotPastTheDeadline: a request whose dispatch slot comes after
// it may wait (queue.max_wait, its own shorter deadline, or its total
// budget) is refused at once with 429, Retry-After and the
// rate_limit_upstream reason, rather than made to wait longer than the
// queue would or sent to time out; its permit is freed and the upstream
// never sees it.
func TestPaceSlotPastTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(p *config.Provider)
		hdr  map[string]string
	}{
		{"total budget", func(p *config.Provider) {
			p.Timeouts.FirstToken, p.Timeouts.Total = 200*time.Millisecond, 250*time.Millisecond
		}, nil},
		{"queue max_wait", func(p *config.Provider) { p.Queue.MaxWait = 200 * time.Millisecond }, nil},
		{"the client's own deadline", nil, map[string]string{"X-Sluice-Max-Wait": "200ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newFakeUpstream(t)
			s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
				p.Limit.Algorithm = settings.AlgorithmAIMD
				p.Limit.Ceiling, p.Limit.Initial = 20, 20
				p.Limit.Cooldown = time.Second
				if tc.mut != nil {
					tc.mut(p)
				}
			}))
			lim := s.srv.limiters.Limiter("fake")
			paceController(t, lim.Controller())
			hdr := map[string]string{"x-json": "1"}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			codes, bodies := postTogether(httpClient(), s.base+"/fake/v1/chat/completions", 2, hdr)
			ok, refused := 0, 0
			for i, code := range codes {
				switch {
				case code == 200:
					ok++
				case code == 429 && strings.HasPrefix(bodies[i], "rate_limit_upstream retry-after="):
					refused++
				default:
					t.Fatalf("request %d: %d %s", i, code, bodies[i])
				}
			}
			if ok != 1 || refused != 1 {
				t.Fatalf("%d served and %d refused, want one of each (%v)", ok, refused, bodies)
			}
			testutil.Eventually(t, "permits freed", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 })
			if n := up.requests.Load(); n != 1 {
				t.Fatalf("upstream saw %d requests, want 1", n)
			}
		})
	}
}

// postTogether posts n streaming chat requests with headers hdr at once
// and returns their statuses and bodies (see postBody).
func postTogether(c *http.Client, url string, n int, hdr map[string]string) ([]int, []string) {
	var wg sync.WaitGroup
	codes, bodies := make([]int, n), make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], bodies[i] = postBody(c, url, hdr)
		}()
	}
	wg.Wait()
	return codes, bodies
}

// slowPaceSluice starts Sluice in front of up with a controller that
// paces dispatches slowly (two requests accepted over a cool-down of 4 s:
// one every 2 s), so that of two requests sent together, the second waits
// for its dispatch slot holding its permit.
func slowPaceSluice(t *testing.T, up *fakeUpstream) (*sluiceUnderTest, *adaptive.Limiter) {
	t.Helper()
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Algorithm = settings.AlgorithmAIMD
		p.Limit.Ceiling, p.Limit.Initial = 20, 20
		p.Limit.Cooldown = 4 * time.Second
		p.Queue.MaxWait = time.Minute
	}))
	lim := s.srv.limiters.Limiter("fake")
	c := lim.Controller()
	now := time.Now
	c.Observe(control.Sample{Kind: control.FirstToken, Now: now(), Dispatched: now(), InflightAtDispatch: 15, TTFT: 100 * time.Millisecond})
	c.Observe(control.Sample{Kind: control.Dropped, Now: now(), Dispatched: now(), InflightAtDispatch: 15, Drop: control.DropRateLimit})
	c.Observe(control.Sample{Kind: control.FirstToken, Now: now(), Dispatched: now(), InflightAtDispatch: 15, TTFT: 100 * time.Millisecond})
	c.Observe(control.Sample{Kind: control.Dropped, Now: now(), Dispatched: now(), InflightAtDispatch: 12, Drop: control.DropRateLimit})
	if p := c.State().Pace; p <= 0 || p > 0.6 {
		t.Fatalf("pace %.2f/s, want a slow one", p)
	}
	return s, lim
}

// TestShutdownWhilePaced: shutdown's cut ends a request that waits for its
// dispatch slot at once: the client gets an answer, the permit is freed,
// and the upstream never sees the request.
func TestShutdownWhilePaced(t *testing.T) {
	up := newFakeUpstream(t)
	s, lim := slowPaceSluice(t, up)
	type result struct {
		code int
		body string
	}
	results := make(chan result, 2)
	hc := httpClient()
	for range 2 {
		go func() {
			code, body := postBody(hc, s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1"})
			results <- result{code, body}
		}()
	}
	first := <-results
	if first.code != 200 {
		t.Fatalf("first request: %d %s", first.code, first.body)
	}
	testutil.Eventually(t, "the second request holding its permit", 2*time.Second, func() bool { return lim.Stats().Inflight == 1 })
	s.srv.Drain()
	if n := s.srv.CutStreams(); n != 1 {
		t.Fatalf("cut %d requests, want 1", n)
	}
	select {
	case r := <-results:
		if r.code != 503 {
			t.Fatalf("paced request at shutdown: %d %s, want 503", r.code, r.body)
		}
	case <-time.After(time.Second):
		t.Fatal("the paced request was not ended by the cut")
	}
	testutil.Eventually(t, "permits freed", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 })
	if n := up.requests.Load(); n != 1 {
		t.Fatalf("upstream saw %d requests, want 1", n)
	}
}

// TestClientGoneWhilePaced: a client that hangs up while its request waits
// for its dispatch slot frees the permit and ends the request at once (not
// at the slot), and the upstream never sees the request, even after the
// slot has passed.
func TestClientGoneWhilePaced(t *testing.T) {
	up := newFakeUpstream(t)
	s, lim := slowPaceSluice(t, up)
	hc := httpClient()
	if code, body := postBody(hc, s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1"}); code != 200 {
		t.Fatalf("first request: %d %s", code, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		r, err := hc.Do(chatRequest(s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1"}).WithContext(ctx))
		if err == nil {
			r.Body.Close()
		}
		done <- err
	}()
	testutil.Eventually(t, "the second request holding its permit", 2*time.Second, func() bool { return lim.Stats().Inflight == 1 })
	hungUp := time.Now()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the canceled request got an answer")
	}
	testutil.Eventually(t, "permit freed and request ended", 2*time.Second, func() bool { return lim.Stats().Inflight == 0 && s.srv.Live() == 0 })
	if d := time.Since(hungUp); d > time.Second {
		t.Fatalf("request ended %v after the client left, want well before its slot (2 s)", d)
	}
	time.Sleep(2500 * time.Millisecond) // past the slot the request had
	if n := up.requests.Load(); n != 1 {
		t.Fatalf("upstream saw %d requests, want 1", n)
	}
	if st := lim.Stats(); st.Inflight != 0 {
		t.Fatalf("%d in flight after the slot passed", st.Inflight)
	}
}
