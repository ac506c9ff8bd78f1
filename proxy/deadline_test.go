package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
)

// TestClientTimeoutIsTheDeadline: ceiling 1, one stream holds the permit.
// A request that sends its client's own timeout waits for a permit until
// that timeout, not until max_wait: longer (an SDK's 600 s read timeout,
// served once the stream ends), shorter (refused while the stream still
// runs), and never past queue.max_client_wait.
func TestClientTimeoutIsTheDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		maxWait, maxCWait time.Duration
		hold              map[string]string // the stream holding the permit
		hdr               map[string]string
		status            int
		atLeast           time.Duration // the shortest wait before the answer
	}{
		{"SDK timeout longer than max_wait", 200 * time.Millisecond, 0,
			map[string]string{"x-events": "6", "x-gap": "100ms"},
			map[string]string{"x-stainless-read-timeout": "600.0"}, 200, 300 * time.Millisecond},
		{"client timeout shorter than max_wait", 10 * time.Minute, 0,
			map[string]string{"x-events": "30", "x-gap": "100ms"},
			map[string]string{"x-stainless-timeout": "0.3"}, 503, 250 * time.Millisecond},
		{"client timeout capped by max_client_wait", 100 * time.Millisecond, 400 * time.Millisecond,
			map[string]string{"x-events": "100", "x-gap": "100ms"},
			map[string]string{"x-stainless-timeout": "600"}, 503, 350 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newFakeUpstream(t)
			s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
				p.Limit.Ceiling, p.Limit.Initial = 1, 1
				p.Queue.MaxWaiting, p.Queue.MaxWait = 10, tc.maxWait
				if tc.maxCWait > 0 {
					p.Queue.MaxClientWait = tc.maxCWait
				}
			}))
			c := httpClient()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/fake/v1/chat/completions", strings.NewReader(`{"stream":true}`))
			for k, v := range tc.hold {
				req.Header.Set(k, v)
			}
			first, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer first.Body.Close()
			go io.Copy(io.Discard, first.Body)
			hdr := map[string]string{"x-json": "1"}
			for k, v := range tc.hdr {
				hdr[k] = v
			}
			t0 := time.Now()
			resp := post(t, c, s.base+"/fake/v1/chat/completions", hdr)
			waited := time.Since(t0)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d %q after %v, want %d: %s", resp.StatusCode, resp.Header.Get(HeaderRejected), waited, tc.status, body)
			}
			if waited < tc.atLeast {
				t.Fatalf("answered %d after %v, before %v", resp.StatusCode, waited, tc.atLeast)
			}
		})
	}
}

// deadlineLeaser is a fleet that always has a lease free and records the
// deadline each request was given to wait for one.
type deadlineLeaser struct {
	next      atomic.Uint64
	mu        sync.Mutex
	deadlines []time.Time
}

func (f *deadlineLeaser) Acquire(deadline time.Time, _ <-chan struct{}) (uint64, error) {
	f.mu.Lock()
	f.deadlines = append(f.deadlines, deadline)
	f.mu.Unlock()
	return f.next.Add(1), nil
}

func (f *deadlineLeaser) Release(uint64) {}

// TestFleetLeaseWaitsWithinClientDeadline: in strict fleet mode the wait
// for a fleet lease shares the request's deadline, its client's own
// timeout when it sends one, not queue.max_wait: a request that waited
// for its permit longer than max_wait would otherwise find its lease's
// deadline passed.
func TestFleetLeaseWaitsWithinClientDeadline(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Queue.MaxWait = 200 * time.Millisecond
	}))
	f := &deadlineLeaser{}
	s.srv.limiters.Limiter("fake").SetLeaser(f)
	c := httpClient()
	sent := time.Now()
	resp := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1", "x-stainless-read-timeout": "600.0"})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.deadlines) != 1 {
		t.Fatalf("%d lease requests, want 1", len(f.deadlines))
	}
	if d := f.deadlines[0].Sub(sent); d < 9*time.Minute {
		t.Fatalf("lease deadline %v after the request was sent, want the client's 600 s", d)
	}
}

var _ adaptive.Leaser = (*deadlineLeaser)(nil)

// TestRateWaitWithinClientDeadline: a rate quota's wait is bounded by the
// request's own deadline, as the permit's is. With rpm 60 spent by one
// request, the next fits in about a second: a client whose timeout is
// shorter is refused 429 at once instead of waiting past it; a client
// that sends none waits within max_wait and is served.
func TestRateWaitWithinClientDeadline(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Rate.RPM, p.Rate.RequestWindow = 60, time.Second // one request a second, no burst
		p.Queue.MaxWait = 10 * time.Second
	}))
	c := httpClient()
	send := func(hdr map[string]string) (int, string, time.Duration) {
		t.Helper()
		hdr["x-json"] = "1"
		t0 := time.Now()
		resp := post(t, c, s.base+"/fake/v1/chat/completions", hdr)
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(HeaderRejected), time.Since(t0)
	}
	if st, why, _ := send(map[string]string{}); st != 200 {
		t.Fatalf("first request: %d %q, want 200", st, why)
	}
	if st, why, d := send(map[string]string{"x-stainless-timeout": "0.2"}); st != 429 || why != "rate_limit_provider" {
		t.Fatalf("client with a 0.2 s timeout: %d %q after %v, want 429 rate_limit_provider", st, why, d)
	}
	if st, why, d := send(map[string]string{}); st != 200 || d < 500*time.Millisecond {
		t.Fatalf("client without a timeout: %d %q after %v, want 200 after waiting for the quota", st, why, d)
	}
}
