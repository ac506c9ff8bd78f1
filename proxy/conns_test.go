package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// holdActive opens a connection with a request whose body is still
// arriving: active, not idle.
func holdActive(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-json: 1\r\nContent-Length: 100\r\n\r\n{")
	return c
}

// activeConns counts the connections s has marked active.
func activeConns(s *Server) int {
	s.conns.mu.Lock()
	defer s.conns.mu.Unlock()
	n := 0
	for _, cc := range s.conns.list {
		if cc.state.Load() == connActive {
			n++
		}
	}
	return n
}

// openIdle opens a connection, completes one request on it and leaves it
// idle (keep-alive), once s has marked it so.
func openIdle(t *testing.T, s *sluiceUnderTest) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addrOf(s.base))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	exchange(t, c, br)
	// fasthttp marks it idle after writing the answer, maybe after the
	// client has read it.
	testutil.Eventually(t, "the connection marked idle", 5*time.Second, func() bool {
		s.srv.conns.mu.Lock()
		defer s.srv.conns.mu.Unlock()
		for _, cc := range s.srv.conns.list {
			if cc.c.RemoteAddr().String() == c.LocalAddr().String() {
				return cc.state.Load() == connIdle
			}
		}
		return false
	})
	return c, br
}

func exchange(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-json: 1\r\nContent-Length: 2\r\n\r\n{}")
	r, err := http.ReadResponse(br, nil)
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("request: %v %v, want 200", r, err)
	}
	io.Copy(io.Discard, r.Body)
}

// readRefusal reads the answer to a new connection refused at a cap.
func readRefusal(t *testing.T, addr string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("refused connection: %v", err)
	}
	return r
}

// M4: server.max_conns_per_ip caps one address's connections: with both
// held active, a third is answered 429 and closed.
func TestConnsPerIPCap(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	m, reg := newTestMetricsReg(t)
	cfg := testConfig(up.url(), nil)
	cfg.Server.MaxConnsPerIP = 2
	s := startSluiceWith(t, cfg, Options{Metrics: m})
	addr := addrOf(s.base)
	holdActive(t, addr)
	holdActive(t, addr)
	testutil.Eventually(t, "two connections active", 5*time.Second, func() bool { return activeConns(s.srv) == 2 })
	if r := readRefusal(t, addr); r.StatusCode != 429 || !r.Close {
		t.Fatalf("third connection: status %d close=%v, want 429, closed", r.StatusCode, r.Close)
	}
	if v := scrape(t, reg).value(t, "sluice_client_connections_closed_total", "reason", "refused_per_ip"); v != 1 {
		t.Errorf("closed{refused_per_ip} = %v, want 1", v)
	}
}

// M4: at server.max_conns_per_ip a new connection closes the address's
// longest-idle keep-alive connection instead of being refused; the other
// idle one keeps working.
func TestIdleConnClosedFirstAtPerIPCap(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	m, reg := newTestMetricsReg(t)
	cfg := testConfig(up.url(), nil)
	cfg.Server.MaxConnsPerIP = 2
	s := startSluiceWith(t, cfg, Options{Metrics: m})
	oldest, oldBR := openIdle(t, s)
	other, otherBR := openIdle(t, s)
	newest, newBR := openIdle(t, s) // served: the oldest idle one made room
	if _, err := oldBR.ReadByte(); err != io.EOF {
		t.Fatalf("the longest-idle connection: %v, want closed", err)
	}
	exchange(t, other, otherBR)
	exchange(t, newest, newBR)
	_ = oldest // kept open by the client: Sluice closed it
	if v := scrape(t, reg).value(t, "sluice_client_connections_closed_total", "reason", "idle_per_ip"); v != 1 {
		t.Errorf("closed{idle_per_ip} = %v, want 1", v)
	}
}

// M4: server.max_connections closes idle keep-alive connections before it
// refuses a new one (which it did whatever the others were doing).
func TestIdleConnClosedFirstAtMaxConnections(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil), func(c *config.Config) { c.Server.MaxConnections = 2 })
	_, oldBR := openIdle(t, s)
	other, otherBR := openIdle(t, s)
	openIdle(t, s) // served: the oldest idle one made room
	if _, err := oldBR.ReadByte(); err != io.EOF {
		t.Fatalf("the longest-idle connection: %v, want closed", err)
	}
	exchange(t, other, otherBR)
}

// The idle keep-alive timeout is server.idle_timeout.
func TestIdleTimeoutClosesKeepAlive(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), nil)
	cfg.Server.IdleTimeout = 200 * time.Millisecond
	s := startSluice(t, cfg)
	c, br := openIdle(t, s)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: %v, want closed by Sluice", err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("closed after %v, before idle_timeout", d)
	}
}

// BenchmarkConnStatePerRequest is what the connection table adds to each
// request: marking its connection active, then idle again.
func BenchmarkConnStatePerRequest(b *testing.B) {
	s := New(Options{})
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	s.connState(c1, fasthttp.StateNew)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.connState(c1, fasthttp.StateActive)
		s.connState(c1, fasthttp.StateIdle)
	}
}
