package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// Defect 6, request bodies: a body over server.max_request_body (default
// 8 MiB, was 32 MiB) is answered 413 in the provider's error shape from
// its Content-Length, before any of it is sent or buffered, and never
// reaches the upstream. A chunked body is refused once it passes the limit.
func TestRequestBodyOverLimitIs413(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	addr := addrOf(s.base)
	// Headers and the body's first byte: the 413 must come without the
	// rest of the 9 MiB being sent.
	resp, body := rawExchange(t, addr, "POST /fake/v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		fmt.Sprintf("Content-Length: %d\r\n\r\n{", 9<<20))
	var e struct {
		Type  string
		Error struct{ Type string }
	}
	if resp.StatusCode != 413 || resp.Header.Get(HeaderError) != "request_too_large" || json.Unmarshal([]byte(body), &e) != nil || e.Error.Type != "request_too_large" {
		t.Fatalf("status %d %q %s, want 413 request_too_large in the Anthropic shape", resp.StatusCode, resp.Header.Get(HeaderError), body)
	}
	if !resp.Close {
		t.Error("the connection stays open with an unread body behind it")
	}

	small := startSluice(t, testConfig(up.url(), nil), func(c *config.Config) { c.Server.MaxRequestBody = 64 << 10 })
	chunk := strings.Repeat("x", 16<<10)
	var sb strings.Builder
	sb.WriteString("POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nx-json: 1\r\n\r\n")
	for i := 0; i < 5; i++ {
		fmt.Fprintf(&sb, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	sb.WriteString("0\r\n\r\n")
	resp, body = rawExchange(t, addrOf(small.base), sb.String())
	if resp.StatusCode != 413 || !strings.Contains(body, `"code":"request_too_large"`) {
		t.Fatalf("chunked body over the limit: status %d %s", resp.StatusCode, body)
	}
	if n := up.requests.Load(); n != 0 {
		t.Fatalf("upstream got %d oversized requests", n)
	}
	// At the limit, chunked: forwarded whole.
	sb.Reset()
	sb.WriteString("POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nx-json: 1\r\n\r\n")
	for i := 0; i < 4; i++ {
		fmt.Fprintf(&sb, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	sb.WriteString("0\r\n\r\n")
	if resp, body = rawExchange(t, addrOf(small.base), sb.String()); resp.StatusCode != 200 {
		t.Fatalf("chunked body at the limit: status %d %s", resp.StatusCode, body)
	}
	up.mu.Lock()
	got := len(up.lastBody)
	up.mu.Unlock()
	if got != 64<<10 {
		t.Fatalf("upstream got %d body bytes, want %d", got, 64<<10)
	}
	testutil.Eventually(t, "budget back to 0", 2*time.Second, func() bool { return small.srv.BufferedBytes() == 0 })
}

// Defect 6, in total: request bodies being read reserve
// server.max_buffered_bytes as they arrive; a body that does not fit gets
// 503 buffer_budget (Retry-After, X-Sluice-Rejected) the moment it does
// not, before the rest is read.
func TestBufferBudgetRefusesBodiesThatDoNotFit(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil), func(c *config.Config) {
		c.Server.MaxRequestBody, c.Server.MaxBufferedBytes = config.MiB, config.MiB
	})
	addr := addrOf(s.base)
	// A slow client: 800 KiB announced, all but one byte sent so far.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	const big = 800 << 10
	fmt.Fprintf(slow, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-json: 1\r\nContent-Length: %d\r\n\r\n", big)
	slow.Write(bytes.Repeat([]byte(" "), big-1))
	testutil.Eventually(t, "the slow body holds what it sent", 5*time.Second, func() bool { return s.srv.BufferedBytes() == big })

	body := `{"model":"m","pad":"` + strings.Repeat("x", 300<<10) + `"}`
	resp, rb := rawExchange(t, addr, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-json: 1\r\n"+
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body))
	if resp.StatusCode != 503 || resp.Header.Get(HeaderRejected) != "buffer_budget" || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(rb, `"code":"buffer_budget"`) {
		t.Fatalf("status %d %q Retry-After %q %s, want 503 buffer_budget", resp.StatusCode, resp.Header.Get(HeaderRejected), resp.Header.Get("Retry-After"), rb)
	}
	// A body that fits goes through meanwhile.
	if resp, rb = rawExchange(t, addr, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-json: 1\r\nContent-Length: 2\r\n\r\n{}"); resp.StatusCode != 200 {
		t.Fatalf("small body: status %d %s", resp.StatusCode, rb)
	}
	// The slow body completes: answered, and its reservation returned.
	slow.Write([]byte(" "))
	sr, err := http.ReadResponse(bufio.NewReader(slow), nil)
	if err != nil || sr.StatusCode != 200 {
		t.Fatalf("slow body: %v %v", sr, err)
	}
	testutil.Eventually(t, "budget back to 0", 2*time.Second, func() bool { return s.srv.BufferedBytes() == 0 })
}

// Defect 6: client connections are capped by server.max_connections; one
// more, while all are busy, is answered 503 and closed.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil), func(c *config.Config) { c.Server.MaxConnections = 2 })
	addr := addrOf(s.base)
	// Both connections busy (bodies still arriving): none can make room.
	held := []net.Conn{holdActive(t, addr), holdActive(t, addr)}
	testutil.Eventually(t, "two connections active", 5*time.Second, func() bool { return activeConns(s.srv) == 2 })
	if r := readRefusal(t, addr); r.StatusCode != 503 || !r.Close {
		t.Fatalf("third connection: status %d close=%v, want 503, closed", r.StatusCode, r.Close)
	}
	held[0].Close()
	testutil.Eventually(t, "a slot free again", 5*time.Second, func() bool {
		resp, err := httpClient().Post(s.base+"/fake/v1/chat/completions", "application/json", strings.NewReader("{}"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode != 503
	})
}

// heapAfterGC is the live heap after one collection: what sync.Pools kept
// from before it is still counted (a pooled buffer survives one GC in the
// pool's victim cache), which is what an idle proxy holds on to.
func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Defect 6, memory: big bodies, to a route or to no route, leave nothing
// big behind in pools. The audit sent 20 x 30 MiB to an unrouted path and
// found 696 MB resident afterwards.
func TestBigBodiesAreNotKeptInPools(t *testing.T) {
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	addr := addrOf(s.base)
	const conns = 10
	run := func(path string, size int) {
		var wg sync.WaitGroup
		for i := 0; i < conns; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer c.Close()
				fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nx-json: 1\r\nContent-Length: %d\r\n\r\n", path, size)
				go func() { // the body; the server may answer and close before it has all of it
					buf := make([]byte, 64<<10)
					for left := size; left > 0; left -= len(buf) {
						if _, err := c.Write(buf[:min(len(buf), left)]); err != nil {
							return
						}
					}
				}()
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				if r, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
					io.Copy(io.Discard, r.Body)
				}
			}()
		}
		wg.Wait()
	}
	base := heapAfterGC()
	run("/nowhere/v1/chat/completions", 30<<20)
	run("/fake/v1/chat/completions", 8<<20-64)
	testutil.Eventually(t, "budget back to 0", 5*time.Second, func() bool { return s.srv.BufferedBytes() == 0 })
	grown := int64(heapAfterGC()) - int64(base)
	t.Logf("heap after %d x 30 MiB unrouted and %d x 8 MiB routed bodies: %+d KiB", conns, conns, grown>>10)
	if grown > 16<<20 {
		t.Fatalf("heap grew by %d MiB after big bodies: kept in pools", grown>>20)
	}
}

// Defect 6, answers: a non-streaming answer over the 64 MiB that used to be
// the most Sluice buffered (then 502) is relayed whole, as it arrives.
// One between pooledBodyMax and server.max_response_body is buffered,
// metered and written from Sluice's buffer. Either way the budget is
// returned.
func TestBigAnswersAreRelayed(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	for _, size := range []int{200 << 10, 70 << 20} {
		req, _ := http.NewRequest("GET", s.base+"/fake/v1/files/file-1/content", nil)
		req.Header.Set("x-json-size", fmt.Sprint(size))
		resp, err := httpClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || n != int64(size) {
			t.Fatalf("%d-byte answer: status %d %q, got %d bytes, %v", size, resp.StatusCode, resp.Header.Get(HeaderError), n, err)
		}
		testutil.Eventually(t, "permit and budget returned", 2*time.Second, func() bool {
			return s.srv.BufferedBytes() == 0 && s.srv.limiters.Limiter("fake").Stats().Inflight == 0
		})
	}
}

// Request headers over 16 KiB are answered 431 as JSON in the OpenAI
// error shape (no route is known yet), not fasthttp's plain text.
func TestHugeHeadersAre431(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	resp, body := rawExchange(t, addrOf(s.base), "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: "+
		strings.Repeat("a", 20<<10)+"\r\nContent-Length: 2\r\n\r\n{}")
	if resp.StatusCode != 431 || resp.Header.Get(HeaderError) != "headers_too_large" || !strings.Contains(body, `"code":"headers_too_large"`) {
		t.Fatalf("status %d %q %s, want 431 headers_too_large", resp.StatusCode, resp.Header.Get(HeaderError), body)
	}
	if up.requests.Load() != 0 {
		t.Fatal("request with oversized headers reached the upstream")
	}
}

// A client that asks "Expect: 100-continue" for a body over the limit gets
// the 413 instead of the 100, and never sends the body.
func TestExpectContinueOverLimitIs413(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil))
	resp, body := rawExchange(t, addrOf(s.base), "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		fmt.Sprintf("Expect: 100-continue\r\nContent-Length: %d\r\n\r\n", 9<<20))
	if resp.StatusCode != 413 || !strings.Contains(body, `"code":"request_too_large"`) {
		t.Fatalf("status %d %s, want 413 request_too_large", resp.StatusCode, body)
	}
	// Within the limit: 100, then the answer.
	c, err := net.Dial("tcp", addrOf(s.base))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-json: 1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
	br := bufio.NewReader(c)
	if line, _ := br.ReadString('\n'); !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("got %q, want 100 Continue", line)
	}
	br.ReadString('\n')
	io.WriteString(c, "{}")
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
		t.Fatalf("after 100: %v %v", r, err)
	}
}
