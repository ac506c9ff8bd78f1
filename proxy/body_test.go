package proxy

import (
	"bufio"
	"bytes"
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

// H1: connections that declare large bodies and send (almost) nothing
// hold budget only for what they sent, so with the default budget the
// audit's 33 connections declaring 8 MiB each leave another client's POST
// served.
func TestDeclaredBodiesHoldNoBudget(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	addr := addrOf(s.base)
	const flood = 33
	for i := 0; i < flood; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-json: 1\r\nContent-Length: %d\r\n\r\n{", 8<<20)
	}
	// One byte sent each: each holds the first step, not 8 MiB.
	const want = flood * (4 << 10)
	testutil.Eventually(t, fmt.Sprintf("the flood to hold %d bytes (one step each)", want), 10*time.Second, func() bool {
		return s.srv.BufferedBytes() == want
	})
	body := `{"model":"m","pad":"` + strings.Repeat("x", 1<<20) + `"}`
	resp, rb := rawExchange(t, addr, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-json: 1\r\n"+
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body))
	if resp.StatusCode != 200 {
		t.Fatalf("a 1 MiB POST during the flood: status %d %s", resp.StatusCode, rb)
	}
}

// M4: a body that trickles is cut after server.body_timeout with 408 in
// the provider's error format, the connection closed, counted as
// rejected{body_timeout}; it never reaches the upstream.
func TestTricklingBodyIsCut(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	m, reg := newTestMetricsReg(t)
	cfg := testConfig(up.url(), nil)
	cfg.Server.BodyTimeout = 300 * time.Millisecond
	s := startSluiceWith(t, cfg, Options{Metrics: m})
	c := dialSluice(t, s)
	io.WriteString(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"mo")
	stop := make(chan struct{})
	defer close(stop)
	go func() { // one byte every 20 ms: far below min_body_rate
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				if _, err := io.WriteString(c, "a"); err != nil {
					return
				}
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 408 || resp.Header.Get(HeaderError) != "body_timeout" || !resp.Close {
		t.Fatalf("status %d %s=%q close=%v %s, want 408 body_timeout, closed", resp.StatusCode, HeaderError, resp.Header.Get(HeaderError), resp.Close, body)
	}
	checkErrorShape(t, "body_timeout", string(body), "body_timeout", false)
	if v := scrape(t, reg).value(t, "sluice_rejected_requests_total", "provider", "fake", "reason", "body_timeout"); v != 1 {
		t.Errorf("rejected{body_timeout} = %v, want 1", v)
	}
	if n := up.requests.Load(); n != 0 {
		t.Fatalf("upstream got %d requests", n)
	}
}

// A body that keeps up with server.min_body_rate earns time past
// server.body_timeout and is not cut.
func TestBodyAtMinRateIsNotCut(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), nil)
	cfg.Server.BodyTimeout, cfg.Server.MinBodyRate = 300*time.Millisecond, 64*config.KiB
	s := startSluice(t, cfg)
	c := dialSluice(t, s)
	const size, piece = 256 << 10, 32 << 10 // each piece earns 500 ms
	body := append(append([]byte(`{"pad":"`), bytes.Repeat([]byte("x"), size-10)...), `"}`...)
	fmt.Fprintf(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-json: 1\r\nContent-Length: %d\r\n\r\n", len(body))
	start := time.Now()
	for off := 0; off < len(body); off += piece {
		if _, err := c.Write(body[off:min(off+piece, len(body))]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a body sent at five times min_body_rate over %v: %v %v, want 200", time.Since(start), resp, err)
	}
}
