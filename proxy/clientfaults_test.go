package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// A client that leaves while queued leaves the queue at once: nothing is
// sent upstream, the request is counted as rejected{client_gone}, and the
// controller hears nothing.
func TestClientGoneWhileQueued(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	m, reg := newTestMetricsReg(t)
	s := startSluiceWith(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = 1, 1
		p.Queue.MaxWaiting, p.Queue.MaxWait = 10, time.Minute
	}), Options{Metrics: m})
	lim := s.srv.limiters.Limiter("fake")
	holder := post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{"x-events": "100", "x-gap": "20ms"})
	defer holder.Body.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/fake/v1/chat/completions", strings.NewReader(`{"stream":true}`))
	done := make(chan error, 1)
	go func() {
		resp, err := httpClient().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	testutil.Eventually(t, "second request queued", 5*time.Second, func() bool { return lim.Stats().Waiting == 1 })
	cancel()
	<-done
	testutil.Eventually(t, "queue empty", 5*time.Second, func() bool { return lim.Stats().Waiting == 0 })
	testutil.Eventually(t, "counted as rejected client_gone", 5*time.Second, func() bool {
		v, _ := scrape(t, reg).lookup("sluice_rejected_requests_total", "provider", "fake", "reason", "client_gone")
		return v == 1
	})
	if n := up.requests.Load(); n != 1 {
		t.Fatalf("upstream got %d requests, want only the holder's", n)
	}
}

// Slowloris: a client that sends its headers, or its body, too slowly is
// closed after server.read_timeout (which also bounds the body's own
// server.body_timeout), holding no permit meanwhile; the body is answered
// 408 and counted as rejected{body_timeout}.
func TestSlowlorisIsClosed(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	m, reg := newTestMetricsReg(t)
	cfg := testConfig(up.url(), nil)
	cfg.Server.ReadTimeout = 300 * time.Millisecond
	s := startSluiceWith(t, cfg, Options{Metrics: m})
	lim := s.srv.limiters.Limiter("fake")
	for name, partial := range map[string]string{
		"headers": "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ",
		"body":    "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mo",
	} {
		c, err := net.Dial("tcp", addrOf(s.base))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, partial)
		// Keep dribbling: one byte every 50 ms never completes the request.
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
					if _, err := io.WriteString(c, "a"); err != nil {
						return
					}
				}
			}
		}()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		close(stop)
		if err != nil {
			t.Fatalf("%s: no answer before the connection closed: %v", name, err)
		}
		io.Copy(io.Discard, resp.Body)
		if !resp.Close || (name == "headers" && resp.StatusCode != 408) || (name == "body" && resp.StatusCode != 408) {
			t.Errorf("%s: status %d close=%v", name, resp.StatusCode, resp.Close)
		}
		if n := lim.Stats().Inflight; n != 0 {
			t.Errorf("%s: %d permits held", name, n)
		}
		c.Close()
	}
	if v := scrape(t, reg).value(t, "sluice_rejected_requests_total", "provider", "fake", "reason", "body_timeout"); v != 1 {
		t.Errorf("rejected{body_timeout} = %v, want 1", v)
	}
	if n := up.requests.Load(); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
}

// Pipelined requests on one connection are answered in order, and the
// bytes of the next request waiting on the socket do not make the
// disconnect watcher think the client left (or went on).
func TestPipelinedRequests(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	c, err := net.Dial("tcp", addrOf(s.base))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var sb strings.Builder
	for i := 0; i < 3; i++ {
		body := fmt.Sprintf(`{"model":"m%d","stream":true}`, i)
		fmt.Fprintf(&sb, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-ttft: 100ms\r\nx-events: %d\r\nContent-Length: %d\r\n\r\n%s", i+1, len(body), body)
	}
	io.WriteString(c, sb.String())
	br := bufio.NewReader(c)
	for i := 0; i < 3; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || strings.Count(string(b), "data: ") != i+3 {
			t.Fatalf("response %d: status %d, %v, body %q", i, resp.StatusCode, err, b)
		}
	}
	if n := s.srv.limiters.Limiter("fake").Stats().Inflight; n != 0 {
		t.Fatalf("%d permits held", n)
	}
}

// A client that leaves half-way through sending its body holds nothing:
// the request is counted as rejected{bad_request_body} and never reaches
// the upstream.
func TestClientGoneDuringBody(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	m, reg := newTestMetricsReg(t)
	s := startSluiceWith(t, testConfig(up.url(), nil), Options{Metrics: m})
	c, err := net.Dial("tcp", addrOf(s.base))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\":")
	time.Sleep(50 * time.Millisecond)
	c.Close()
	testutil.Eventually(t, "counted as rejected bad_request_body", 5*time.Second, func() bool {
		v, _ := scrape(t, reg).lookup("sluice_rejected_requests_total", "provider", "fake", "reason", "bad_request_body")
		return v == 1
	})
	if s.srv.BufferedBytes() != 0 || up.requests.Load() != 0 {
		t.Fatalf("buffered %d bytes, upstream got %d requests", s.srv.BufferedBytes(), up.requests.Load())
	}
}

// When shutdown's grace period ends, streams in flight are cut (the client
// sees a truncated stream, counted end=shutdown) and queued requests get
// 503 shutting_down.
func TestShutdownCutsStreamsAndQueue(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	m, reg := newTestMetricsReg(t)
	s := startSluiceWith(t, testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = 1, 1
		p.Queue.MaxWaiting, p.Queue.MaxWait = 10, time.Minute
	}), Options{Metrics: m})
	lim := s.srv.limiters.Limiter("fake")
	streaming := post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{"x-events": "1000", "x-gap": "20ms"})
	defer streaming.Body.Close()
	queued := make(chan *http.Response, 1)
	go func() {
		queued <- post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{"x-json": "1"})
	}()
	testutil.Eventually(t, "one streaming, one queued", 5*time.Second, func() bool {
		st := lim.Stats()
		return st.Inflight == 1 && st.Waiting == 1 && st.Decoding == 1
	})
	s.srv.Drain()
	if n := s.srv.CutStreams(); n != 2 {
		t.Fatalf("cut %d requests, want 2", n)
	}
	if _, err := io.Copy(io.Discard, streaming.Body); err == nil {
		t.Error("a cut stream read as complete")
	}
	q := <-queued
	io.Copy(io.Discard, q.Body)
	q.Body.Close()
	if q.StatusCode != 503 || q.Header.Get(HeaderError) != "shutting_down" {
		t.Errorf("queued request: %d %q, want 503 shutting_down", q.StatusCode, q.Header.Get(HeaderError))
	}
	testutil.Eventually(t, "the stream counted end=shutdown", 5*time.Second, func() bool {
		v, _ := scrape(t, reg).lookup("sluice_requests_total", "provider", "fake", "end", "shutdown")
		return v == 1
	})
	testutil.Eventually(t, "permits freed", 5*time.Second, func() bool { st := lim.Stats(); return st.Inflight == 0 && st.Decoding == 0 })
}
