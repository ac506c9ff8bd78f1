package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// chatRequest is a streaming chat request to url with headers hdr.
func chatRequest(url string, hdr map[string]string) *http.Request {
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

func post(t *testing.T, c *http.Client, url string, hdr map[string]string) *http.Response {
	t.Helper()
	resp, err := c.Do(chatRequest(url, hdr))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

func TestStreamIsForwardedEventByEvent(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	c := httpClient()
	start := time.Now()
	resp := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{
		"x-events": "4", "x-gap": "150ms", "x-ttft": "300ms", "Authorization": "Bearer client-key",
	})
	defer resp.Body.Close()
	headersAt := time.Since(start)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if headersAt > 250*time.Millisecond {
		t.Fatalf("headers arrived after %v: not before the first token (300ms)", headersAt)
	}
	br := bufio.NewReader(resp.Body)
	var stamps []time.Duration
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if err != io.EOF {
				t.Fatalf("read: %v", err)
			}
			break
		}
		if strings.HasPrefix(line, "data: ") {
			stamps = append(stamps, time.Since(start))
		}
	}
	// role chunk + 4 content events + [DONE]
	if len(stamps) != 6 {
		t.Fatalf("got %d events, want 6", len(stamps))
	}
	// Each content event arrives on its own, ~150ms after the previous one:
	// nothing is batched behind the next event.
	for i := 2; i < 5; i++ {
		gap := stamps[i] - stamps[i-1]
		if gap < 100*time.Millisecond {
			t.Fatalf("event %d arrived %v after event %d: events were batched (stamps %v)", i, gap, i-1, stamps)
		}
	}
	// Assertions from inside the upstream: path stripped, client auth passed,
	// hop-by-hop gone, X-Forwarded-For added, Host set to the upstream.
	up.mu.Lock()
	defer up.mu.Unlock()
	if up.lastURI != "/v1/chat/completions" {
		t.Errorf("upstream saw path %q", up.lastURI)
	}
	if got := string(up.lastReq.Peek("Authorization")); got != "Bearer client-key" {
		t.Errorf("upstream Authorization = %q", got)
	}
	if got := string(up.lastReq.Peek("X-Forwarded-For")); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q", got)
	}
	if got := string(up.lastReq.Host()); got != strings.TrimPrefix(up.url(), "http://") {
		t.Errorf("Host = %q", got)
	}
	testutil.Eventually(t, "permit released", 2*time.Second, func() bool { return s.srv.limiters.Limiter("fake").Stats().Inflight == 0 })
}

func TestUpstreamDeathIsVisibleAsTruncation(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	resp := post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{"x-events": "5", "x-die-after": "2"})
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("stream that died upstream read as complete: %q", body)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("read error: %v", err)
	}
	if strings.Contains(string(body), "[DONE]") {
		t.Fatal("truncated stream carries [DONE]")
	}
	testutil.Eventually(t, "permit released", 2*time.Second, func() bool { return s.srv.limiters.Limiter("fake").Stats().Inflight == 0 })
}

func TestKeyInjectionReplacesClientAuth(t *testing.T) {
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.APIKey = "sk-injected"
		p.Auth = config.AuthXAPIKey
		p.Headers = map[string]string{"anthropic-version": "2023-06-01"}
	})
	s := startSluice(t, cfg)
	resp := post(t, httpClient(), s.base+"/fake/v1/messages?beta=true", map[string]string{"Authorization": "Bearer client", "Connection": "keep-alive, X-Hop", "X-Hop": "secret"})
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	up.mu.Lock()
	defer up.mu.Unlock()
	if got := string(up.lastReq.Peek("x-api-key")); got != "sk-injected" {
		t.Errorf("x-api-key = %q", got)
	}
	if got := up.lastReq.Peek("Authorization"); len(got) != 0 {
		t.Errorf("client Authorization forwarded: %q", got)
	}
	if got := up.lastReq.Peek("X-Hop"); len(got) != 0 {
		t.Errorf("header named by Connection forwarded: %q", got)
	}
	if got := string(up.lastReq.Peek("anthropic-version")); got != "2023-06-01" {
		t.Errorf("extra header = %q", got)
	}
	if up.lastURI != "/v1/messages?beta=true" {
		t.Errorf("uri = %q", up.lastURI)
	}
}

func TestUnknownRouteIs404JSON(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	for _, path := range []string{"/nope/v1/chat/completions", "/fakex/v1/chat/completions"} {
		resp := post(t, httpClient(), s.base+path, nil)
		var body struct {
			Error struct{ Message, Type, Code string }
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatalf("%s: body not JSON: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 || body.Error.Code != "no_route" || resp.Header.Get(HeaderError) != "no_route" {
			t.Fatalf("%s: status %d body %+v", path, resp.StatusCode, body)
		}
	}
	if up.requests.Load() != 0 {
		t.Fatal("upstream contacted for an unknown route")
	}
}

// An absolute-form request line naming another host must not pick or reach
// that host: only configured upstreams are ever contacted.
func TestAbsoluteURIDoesNotPickUpstream(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	conn, err := (&net.Dialer{}).Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST http://169.254.169.254/fake/v1/chat/completions HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\nContent-Length: 2\r\nx-json: 1\r\n\r\n{}")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || up.requests.Load() != 1 {
		t.Fatalf("status %d, upstream requests %d: absolute URI should reach the configured upstream only", resp.StatusCode, up.requests.Load())
	}
}

// Ceiling 1: an open stream holds the only permit; a second request waits
// and gets 503 queue_timeout after max_wait; once the stream ends, however
// it ends, the next request goes through.
func TestCeilingOneHoldsPermitForWholeStream(t *testing.T) {
	ends := []struct {
		name string
		hdr  map[string]string
		end  func(resp *http.Response, cancel context.CancelFunc)
	}{
		{"normal end", map[string]string{"x-events": "6", "x-gap": "100ms"}, func(r *http.Response, _ context.CancelFunc) { io.Copy(io.Discard, r.Body) }},
		{"upstream error", map[string]string{"x-events": "8", "x-gap": "100ms", "x-die-after": "6"}, func(r *http.Response, _ context.CancelFunc) { io.Copy(io.Discard, r.Body) }},
		{"client disconnect mid-stream", map[string]string{"x-events": "100", "x-gap": "50ms"}, func(r *http.Response, cancel context.CancelFunc) {
			br := bufio.NewReader(r.Body)
			br.ReadString('\n')
			cancel()
			r.Body.Close()
		}},
		{"client disconnect before first token", map[string]string{"x-ttft": "20s"}, func(r *http.Response, cancel context.CancelFunc) {
			cancel()
			r.Body.Close()
		}},
	}
	for _, tc := range ends {
		t.Run(tc.name, func(t *testing.T) {
			up := newFakeUpstream(t)
			s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
				p.Limit.Ceiling, p.Limit.Initial = 1, 1
				p.Queue.MaxWaiting, p.Queue.MaxWait = 10, 200*time.Millisecond
			}))
			c := httpClient()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/fake/v1/chat/completions", strings.NewReader(`{"stream":true}`))
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			first, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			// The stream is open: the second request must wait, then be
			// rejected by Sluice with Retry-After (503: the provider is at
			// its limit).
			t0 := time.Now()
			second := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1"})
			waited := time.Since(t0)
			body, _ := io.ReadAll(second.Body)
			second.Body.Close()
			if second.StatusCode != 503 || second.Header.Get(HeaderRejected) != "queue_timeout" || second.Header.Get("Retry-After") == "" {
				t.Fatalf("second request: %d %q %q %s", second.StatusCode, second.Header.Get(HeaderRejected), second.Header.Get("Retry-After"), body)
			}
			if waited < 150*time.Millisecond {
				t.Fatalf("rejected after %v, before max_wait", waited)
			}
			if !strings.Contains(string(body), `"code":"queue_timeout"`) {
				t.Fatalf("body not in OpenAI error shape: %s", body)
			}
			tc.end(first, cancel)
			first.Body.Close()
			testutil.Eventually(t, "permit freed", 2*time.Second, func() bool { return s.srv.limiters.Limiter("fake").Stats().Inflight == 0 })
			third := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1"})
			io.Copy(io.Discard, third.Body)
			third.Body.Close()
			if third.StatusCode != 200 {
				t.Fatalf("after the stream ended: status %d", third.StatusCode)
			}
		})
	}
}

// A client that goes away while the upstream is silent (no headers yet, or
// headers but no token) frees its permit and closes the upstream connection
// within about 250ms, not at the next event.
func TestDisconnectWhileUpstreamSilent(t *testing.T) {
	for _, late := range []string{"0", "1"} {
		t.Run("headers-late="+late, func(t *testing.T) {
			up := newFakeUpstream(t)
			s := startSluice(t, testConfig(up.url(), nil))
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/fake/v1/chat/completions", strings.NewReader(`{"stream":true}`))
			req.Header.Set("x-ttft", "30s")
			req.Header.Set("x-headers-late", late)
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := httpClient().Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			lim := s.srv.limiters.Limiter("fake")
			testutil.Eventually(t, "request in flight", 2*time.Second, func() bool { return up.inflight.Load() == 1 && lim.Stats().Inflight == 1 })
			time.Sleep(50 * time.Millisecond)
			t0 := time.Now()
			cancel()
			testutil.Eventually(t, "permit freed", time.Second, func() bool { return lim.Stats().Inflight == 0 })
			if d := time.Since(t0); d > 250*time.Millisecond {
				t.Fatalf("permit freed %v after the client left", d)
			}
			<-done
		})
	}
}

// Under 500 concurrent clients the upstream never sees more requests in
// flight than the ceiling.
func TestCeilingHoldsUnder500Clients(t *testing.T) {
	up := newFakeUpstream(t)
	const ceiling = 8
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = ceiling, ceiling
		p.Queue.MaxWaiting, p.Queue.MaxWait = 1000, 30*time.Second
	}))
	c := httpClient()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for i := 0; i < 500; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"x-events": "3", "x-gap": "2ms"})
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if m := up.maxSeen.Load(); m > ceiling {
		t.Fatalf("upstream saw %d in flight, ceiling %d", m, ceiling)
	}
	if codes[200] != 500 {
		t.Fatalf("status codes %v, want 500 x 200", codes)
	}
	testutil.Eventually(t, "permits back to 0", 2*time.Second, func() bool {
		st := s.srv.limiters.Limiter("fake").Stats()
		return st.Inflight == 0 && st.Waiting == 0
	})
	t.Logf("upstream max in flight %d (ceiling %d)", up.maxSeen.Load(), ceiling)
}

// first_token bounds streams only: a non-streaming answer, whose headers a
// provider sends when the whole answer is ready, has the total budget.
func TestFirstTokenTimeoutAppliesToStreamsOnly(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Timeouts.FirstToken = 100 * time.Millisecond
		p.Timeouts.Total = 5 * time.Second
	}))
	c := httpClient()
	send := func(body string, hdr map[string]string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", s.base+"/fake/v1/chat/completions", strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := send(`{"model":"m","stream":false}`, map[string]string{"x-json": "1", "x-ttft": "400ms"})
	if resp.StatusCode != 200 {
		t.Fatalf("slow non-streaming answer: %d %s", resp.StatusCode, body)
	}
	resp, body = send(`{"model":"m","stream":true}`, map[string]string{"x-ttft": "400ms", "x-headers-late": "1"})
	if resp.StatusCode != 504 || resp.Header.Get(HeaderError) != "first_token_timeout" {
		t.Fatalf("stream without headers past first_token: %d %q %s", resp.StatusCode, resp.Header.Get(HeaderError), body)
	}
}

// Non-streaming traffic under the default algorithm: a whole answer gives
// the delay part no TTFT sample, and the limit used to stay at initial for
// good (on the wire: 60 clients, a provider with room for 40, ceiling 50,
// the limit held at 20). With the load using the whole limit it must reach
// the ceiling, and every permit must come back.
func TestNonStreamingTrafficReachesTheCeiling(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Algorithm = settings.AlgorithmGradient2
		p.Limit.Ceiling, p.Limit.Initial, p.Limit.Min = 16, 4, 1
		p.Limit.Window, p.Limit.WindowSamples = 100*time.Millisecond, 2
	}))
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("x-json", "1")
				req.Header.Set("x-ttft", "20ms")
				resp, err := c.Do(req)
				if err != nil {
					failed.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		}()
	}
	testutil.Eventually(t, "the upstream to see the ceiling of 16 in flight", 10*time.Second, func() bool { return up.maxSeen.Load() >= 16 })
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d requests failed", n)
	}
	if got := up.maxSeen.Load(); got > 16 {
		t.Errorf("upstream saw %d in flight, over the ceiling of 16", got)
	}
	testutil.Eventually(t, "permits back to 0", 5*time.Second, func() bool {
		st := s.srv.limiters.Limiter("fake").Stats()
		return st.Inflight == 0 && st.Waiting == 0
	})
}
