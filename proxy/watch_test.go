package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// Defect 3: a client that sends bytes after its request (the start of a
// pipelined request, a stray newline) and then closes is noticed as gone:
// the watcher used to see the unread byte, re-arm, wake again at once
// (spinning on a core) and keep the permit until first_token.
func TestDisconnectAfterExtraBytesIsNoticed(t *testing.T) {
	up, s, lim, conn := watchedSluice(t)
	sendStreamRequest(conn, "x-ttft: 30s\r\nx-headers-late: 1\r\n")
	testutil.Eventually(t, "request at the upstream", 5*time.Second, func() bool { return up.inflight.Load() == 1 && lim.Stats().Inflight == 1 })
	_, _ = io.WriteString(conn, "GET /")
	time.Sleep(50 * time.Millisecond) // the byte arrives while the request waits for headers
	wakeups := s.srv.watch.wakeups.Load()
	conn.Close()
	testutil.Eventually(t, "permit freed after the client closed", 5*time.Second, func() bool { return lim.Stats().Inflight == 0 })
	testutil.Eventually(t, "upstream request closed", 5*time.Second, func() bool { return up.inflight.Load() == 0 })
	// The unread byte alone must not wake the watcher again and again.
	if n := s.srv.watch.wakeups.Load() - wakeups; n > 4 {
		t.Fatalf("watcher woke %d times for one disconnect", n)
	}
	if n := wakeups; n > 2 {
		t.Fatalf("watcher woke %d times before the client closed (unread data only)", n)
	}
}

// A keep-alive client connection joins the epoll set once, not once per
// request, and the watcher still notices when the client leaves during a
// later request on that connection (the permit is freed while the upstream
// is silent).
func TestWatcherArmsOncePerConnection(t *testing.T) {
	up, s, lim, conn := watchedSluice(t)
	br := bufio.NewReader(conn)
	send := func(extra string) { sendStreamRequest(conn, extra) }
	for i := range 10 {
		send("")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %d, %v", i, resp.StatusCode, err)
		}
		resp.Body.Close()
	}
	if n := s.srv.watch.arms.Load(); n != 1 {
		t.Fatalf("10 requests on one connection armed the watcher %d times, want 1", n)
	}
	s.srv.watch.mu.Lock()
	known := len(s.srv.watch.fds)
	s.srv.watch.mu.Unlock()
	if known != 1 {
		t.Fatalf("the watcher knows %d connections, want 1", known)
	}
	send("x-ttft: 30s\r\nx-headers-late: 1\r\n")
	testutil.Eventually(t, "request at the upstream", 5*time.Second, func() bool { return up.inflight.Load() == 1 && lim.Stats().Inflight == 1 })
	conn.Close()
	testutil.Eventually(t, "permit freed after the client closed", 5*time.Second, func() bool { return lim.Stats().Inflight == 0 })
	testutil.Eventually(t, "upstream request closed", 5*time.Second, func() bool { return up.inflight.Load() == 0 })
	testutil.Eventually(t, "the closed connection forgotten", 5*time.Second, func() bool {
		s.srv.watch.mu.Lock()
		defer s.srv.watch.mu.Unlock()
		return len(s.srv.watch.fds) == 0
	})
}

// After a connection's first request, watching a request on it allocates
// nothing (finding a socket's descriptor does, so it is done once).
func TestWatcherAllocatesNothingPerRequest(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the disconnect watcher runs on Linux")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := newWatcher()
	defer w.close()
	st := new(stream)
	w.add(st, c, 7)
	w.remove(st)
	if n := testing.AllocsPerRun(100, func() { w.add(st, c, 7); w.remove(st) }); n != 0 {
		t.Fatalf("%v allocations per watched request", n)
	}
	if st.watchFD != 0 || w.conns[connFD(c)].st != nil || !w.conns[connFD(c)].armed {
		t.Fatalf("after remove: watchFD %d, entry %+v", st.watchFD, w.conns[connFD(c)])
	}
	w.forget(c)
	if len(w.fds) != 0 {
		t.Fatal("forget kept the connection")
	}
}

// watchedSluice starts Sluice (first_token 30 s) in front of a fake
// upstream, with a raw client connection to it; the test is skipped where
// there is no disconnect watcher.
func watchedSluice(t *testing.T) (*fakeUpstream, *sluiceUnderTest, *adaptive.Limiter, net.Conn) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the disconnect watcher runs on Linux")
	}
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Timeouts.FirstToken, p.Timeouts.Total = 30*time.Second, time.Minute
	}))
	return up, s, s.srv.limiters.Limiter("fake"), dialSluice(t, s)
}
