package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// startSluiceSmallBuffers is startSluice on a listener whose connections
// have a 64 KiB receive buffer, fixed (no autotuning: loopback's grows to
// 32 MiB here), as a long-distance client's bytes in flight are bounded by
// the window: a client that sends a 12 MiB body cannot have it all taken
// by the kernels; Sluice has to read it, or the client's write fails.
func startSluiceSmallBuffers(t *testing.T, cfg *config.Config, muts ...func(*config.Config)) *sluiceUnderTest {
	t.Helper()
	return startSluiceOn(t, cfg, func(ln net.Listener) net.Listener { return smallBufListener{ln} }, muts...)
}

type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(64 << 10)
	}
	return c, err
}

// sendWholeThenRead sends a request as the OpenAI and Anthropic SDKs do:
// the head, then the whole body of n bytes (chunked when n < 0, -n bytes),
// and only then reads the answer. Sluice may refuse it from the head
// alone; the client must still be able to write the rest and read the
// answer. A write or read error fails the test: it is the SDKs'
// "APIConnectionError: write ECONNRESET".
func sendWholeThenRead(t *testing.T, addr, method, path, extra string, n int) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return writeWholeThenRead(t, c, method, path, extra, n)
}

// writeWholeThenRead is sendWholeThenRead on the connection c.
func writeWholeThenRead(t *testing.T, c net.Conn, method, path, extra string, n int) (*http.Response, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	chunked := n < 0
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s", method, path, extra)
	if chunked {
		n = -n
		head += "Transfer-Encoding: chunked\r\n\r\n"
	} else {
		head += fmt.Sprintf("Content-Length: %d\r\n\r\n", n)
	}
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatalf("writing the head: %v", err)
	}
	piece := bytes.Repeat([]byte("x"), 64<<10)
	for left := n; left > 0; left -= len(piece) {
		p := piece[:min(len(piece), left)]
		if chunked {
			p = append(fmt.Appendf(nil, "%x\r\n", len(p)), append(p, "\r\n"...)...)
		}
		if _, err := c.Write(p); err != nil {
			t.Fatalf("writing the body, %d of %d bytes left: %v", left, n, err)
		}
	}
	if chunked {
		if _, err := io.WriteString(c, "0\r\n\r\n"); err != nil {
			t.Fatalf("writing the last chunk: %v", err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer's body: %v", err)
	}
	return resp, string(body)
}

// A refusal answered before the request body is read reaches a client
// that writes its whole body before reading (the SDKs), in the provider's
// error format: Sluice reads and drops the rest of the body before it
// closes the connection. It used to close at once, and the kernel's reset
// for the unread bytes destroyed the answer (the SDKs saw ECONNRESET; curl,
// which reads while it sends, got the 413).
func TestRefusalOfUnreadBodyReachesClient(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluiceSmallBuffers(t, testConfig(up.url(), nil))
	// The test asserts that the answer arrives, not how fast a loaded
	// machine moves 12 MiB: each client closes once it has read the answer,
	// which ends the linger long before this.
	s.srv.lingers.mu.Lock()
	s.srv.lingers.wait = 30 * time.Second
	s.srv.lingers.mu.Unlock()
	addr := addrOf(s.base)
	// Over server.max_request_body (8 MiB), and more than the socket
	// buffers hold: a client writing it all before reading gets stuck, or
	// reset, unless Sluice reads it.
	const big = 12 << 20
	const keepAlive = "Connection: keep-alive\r\n" // as the SDKs' agents send
	for _, tc := range []struct {
		name, method, path string
		extra              string // header lines
		n                  int    // body bytes; negative: chunked
		status             int
		reason             string
		anthropic          bool
	}{
		{"413 Content-Length, Anthropic shape", "POST", "/fake/v1/messages", keepAlive, big, 413, "request_too_large", true},
		{"413 Content-Length, OpenAI shape", "POST", "/fake/v1/chat/completions", keepAlive, big, 413, "request_too_large", false},
		{"413, the client asks to close", "POST", "/fake/v1/chat/completions", "Connection: close\r\n", big, 413, "request_too_large", false},
		{"413 chunked", "POST", "/fake/v1/chat/completions", keepAlive, -big, 413, "request_too_large", false},
		{"404 no_route", "POST", "/nowhere/v1/chat/completions", keepAlive, big, 404, "no_route", false},
		{"404 no_route, chunked", "POST", "/nowhere/v1/messages", keepAlive, -big, 404, "no_route", true},
		{"400 bad_path", "POST", "/fake/v1/a%2Fb", keepAlive, big, 400, "bad_path", false},
		{"405 method_not_allowed", "PUT", "/fake/v1/chat/completions", keepAlive, big, 405, "method_not_allowed", false},
	} {
		resp, body := sendWholeThenRead(t, addr, tc.method, tc.path, tc.extra, tc.n)
		if resp.StatusCode != tc.status || resp.Header.Get(HeaderError) != tc.reason {
			t.Fatalf("%s: status %d %s=%q %s, want %d %s", tc.name, resp.StatusCode, HeaderError, resp.Header.Get(HeaderError), body, tc.status, tc.reason)
		}
		if !resp.Close {
			t.Errorf("%s: no Connection: close with the body unread", tc.name)
		}
		if v := resp.Header.Get(HeaderShouldRetry); v != "false" {
			t.Errorf("%s: %s %q, want false (a retry gets the same answer)", tc.name, HeaderShouldRetry, v)
		}
		checkErrorShape(t, tc.name, body, tc.reason, tc.anthropic)
	}
	if n := up.requests.Load(); n != 0 {
		t.Fatalf("the upstream got %d refused requests", n)
	}
	// Each refused connection lingered until its client closed.
	testutil.Eventually(t, "no connection lingering", 5*time.Second, func() bool { return s.srv.lingers.len() == 0 })
}

// checkErrorShape checks that body is the provider's error JSON for reason:
// {"type":"error","error":{"type","message"}} for Anthropic (typed
// request_too_large or not_found_error), {"error":{"message","type","code"}}
// for OpenAI (code reason).
func checkErrorShape(t *testing.T, name, body, reason string, anthropic bool) {
	t.Helper()
	var e struct {
		Type  string
		Error struct{ Type, Message, Code string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("%s: body %q is not an error in the provider's format (%v)", name, body, err)
	}
	if anthropic {
		want := map[string]string{"request_too_large": "request_too_large", "no_route": "not_found_error"}[reason]
		if e.Type != "error" || e.Error.Type != want {
			t.Fatalf("%s: %s, want the Anthropic shape typed %s", name, body, want)
		}
		return
	}
	if e.Error.Code != reason || e.Error.Type == "" {
		t.Fatalf("%s: %s, want the OpenAI shape with code %s", name, body, reason)
	}
}

// The same over TLS: Sluice's side ends with close_notify, and the
// answer arrives whole.
func TestRefusalOfUnreadBodyReachesTLSClient(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	up := newFakeUpstream(t)
	s := startSluiceOn(t, testConfig(up.url(), nil), func(ln net.Listener) net.Listener {
		return tls.NewListener(smallBufListener{ln}, &tls.Config{Certificates: []tls.Certificate{pki.cert}, MinVersion: tls.VersionTLS12})
	})
	caPEM, err := os.ReadFile(pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c, err := tls.Dial("tcp", addrOf(s.base), &tls.Config{RootCAs: roots, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, body := writeWholeThenRead(t, c, "POST", "/fake/v1/messages", "", 12<<20)
	if resp.StatusCode != 413 || resp.Header.Get(HeaderError) != "request_too_large" || !resp.Close {
		t.Fatalf("status %d %s=%q close %v %s, want 413 request_too_large, closed", resp.StatusCode, HeaderError, resp.Header.Get(HeaderError), resp.Close, body)
	}
	checkErrorShape(t, "TLS", body, "request_too_large", true)
	c.Close()
	testutil.Eventually(t, "no connection lingering", 5*time.Second, func() bool { return s.srv.lingers.len() == 0 })
}

// The 503 buffer_budget refusal, decided before the body is read, reaches
// a client that sends its whole body first.
func TestBufferBudgetRefusalReachesClient(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluiceSmallBuffers(t, testConfig(up.url(), nil), func(c *config.Config) {
		c.Server.MaxRequestBody, c.Server.MaxBufferedBytes = 16*config.MiB, 16*config.MiB
	})
	addr := addrOf(s.base)
	// A slow body holds the whole budget: all but its last byte sent.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	const held = 16 << 20
	fmt.Fprintf(slow, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-json: 1\r\nContent-Length: %d\r\n\r\n", held)
	slow.Write(bytes.Repeat([]byte(" "), held-1))
	testutil.Eventually(t, "the slow body holds what it sent", 5*time.Second, func() bool { return s.srv.BufferedBytes() == held })

	resp, body := sendWholeThenRead(t, addr, "POST", "/fake/v1/chat/completions", "x-json: 1\r\n", 12<<20)
	if resp.StatusCode != 503 || resp.Header.Get(HeaderRejected) != "buffer_budget" || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("status %d %s=%q Retry-After %q %s, want 503 buffer_budget", resp.StatusCode, HeaderRejected,
			resp.Header.Get(HeaderRejected), resp.Header.Get("Retry-After"), body)
	}
	checkErrorShape(t, "buffer_budget", body, "buffer_budget", false)
	if up.requests.Load() != 0 {
		t.Fatal("the refused request reached the upstream")
	}
}

// A refusal whose unread body is small (known length, up to what fasthttp
// drains itself) keeps the connection: the next request on it is served.
func TestSmallUnreadBodyKeepsConnection(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	c := dialSluice(t, s)
	br := bufio.NewReader(c)
	pad := strings.Repeat("x", 10<<10)
	fmt.Fprintf(c, "POST /nowhere/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(pad), pad)
	r, err := http.ReadResponse(br, nil)
	if err != nil || r.StatusCode != 404 {
		t.Fatalf("first request: %v %v, want 404", r, err)
	}
	io.Copy(io.Discard, r.Body)
	if r.Close {
		t.Fatal("a 10 KiB unread body closed the connection")
	}
	io.WriteString(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-json: 1\r\nContent-Length: 2\r\n\r\n{}")
	if r, err = http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
		t.Fatalf("second request on the same connection: %v %v, want 200", r, err)
	}
	io.Copy(io.Discard, r.Body)
	if n := s.srv.lingers.len(); n != 0 {
		t.Fatalf("%d connections lingering", n)
	}
}

// A refused connection whose client neither sends nor closes lingers at
// most until Server.Close, which ends it at once (here the linger would
// otherwise last a minute): shutdown never waits for one, and no
// goroutine is left behind.
func TestLingeringConnectionIsCutAtClose(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	s.srv.lingers.mu.Lock()
	s.srv.lingers.wait = time.Minute
	s.srv.lingers.mu.Unlock()
	c := dialSluice(t, s)
	fmt.Fprintf(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{", 12<<20)
	br := bufio.NewReader(c)
	r, err := http.ReadResponse(br, nil)
	if err != nil || r.StatusCode != 413 {
		t.Fatalf("%v %v, want 413", r, err)
	}
	io.Copy(io.Discard, r.Body)
	// The answer is followed by the end of Sluice's side.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the answer: %v, want EOF (write side shut)", err)
	}
	testutil.Eventually(t, "the connection lingers", 5*time.Second, func() bool { return s.srv.lingers.len() == 1 })
	closed := make(chan struct{})
	go func() {
		s.srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Server.Close waited for a lingering connection")
	}
	if n := s.srv.lingers.len(); n != 0 {
		t.Fatalf("%d connections still lingering after Close", n)
	}
}

// At most maxLingering connections linger; beyond, the answer is written
// and the connection closed at once. A closed set lingers nothing.
func TestLingerSetIsBounded(t *testing.T) {
	t.Parallel()
	var l lingerSet
	var conns []net.Conn
	for i := 0; i <= maxLingering; i++ {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		linger, ok := l.enter(a)
		if !ok || linger != (i < maxLingering) {
			t.Fatalf("connection %d: linger %v ok %v", i, linger, ok)
		}
		conns = append(conns, a)
	}
	for _, c := range conns {
		l.leave(c)
	}
	l.close()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, ok := l.enter(a); ok {
		t.Fatal("a closed set took a connection")
	}
}
