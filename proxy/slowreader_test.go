package proxy

import (
	"bufio"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// slowClient opens a stream through Sluice on a connection with a small
// receive buffer, reads the response headers, and from then on reads
// nothing (perByte 0) or one byte every perByte. It returns the
// connection; closing it stops the reader.
func slowClient(t testing.TB, addr string, perByte time.Duration, hdr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	body := `{"model":"m","stream":true}`
	io.WriteString(c, "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		hdr+"Content-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
	br := bufio.NewReaderSize(c, 16)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading headers: %v", err)
		}
		if line == "\r\n" {
			break
		}
	}
	if perByte > 0 {
		go func() {
			var b [1]byte
			for {
				if _, err := c.Read(b[:]); err != nil {
					return
				}
				time.Sleep(perByte)
			}
		}()
	}
	return c
}

// A client that stops reading a stream, or reads it one byte at a time,
// is cut after server.write_timeout: its permit is freed, its upstream
// request closed, and the request counted as client_slow. Before, the
// write deadline was the stream's total budget (10 min by default) and the
// permit was held all that time.
func TestSlowReaderIsCut(t *testing.T) {
	t.Parallel()
	for name, perByte := range map[string]time.Duration{"stops reading": 0, "reads a byte every 100ms": 100 * time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := newFakeUpstream(t)
			m, reg := newTestMetricsReg(t)
			cfg := testConfig(up.url(), func(p *config.Provider) {
				p.Timeouts.Idle, p.Timeouts.Total = time.Minute, 10*time.Minute
			})
			cfg.Server.WriteTimeout = 300 * time.Millisecond
			s := startSluiceWith(t, cfg, Options{Metrics: m})
			c := slowClient(t, addrOf(s.base), perByte, "x-events: 1000000\r\nx-gap: 0s\r\n")
			defer c.Close()
			lim := s.srv.limiters.Limiter("fake")
			testutil.Eventually(t, "permit freed", 30*time.Second, func() bool { return lim.Stats().Inflight == 0 })
			testutil.Eventually(t, "upstream request closed", 10*time.Second, func() bool { return up.inflight.Load() == 0 })
			if v := scrape(t, reg).value(t, "sluice_requests_total", "provider", "fake", "end", "client_slow"); v != 1 {
				t.Fatalf("client_slow = %v, want 1", v)
			}
		})
	}
}

// vmRSS is the process's resident set size from /proc (0 elsewhere).
func vmRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// What a stalled stream costs and how long it holds its permit, measured.
// Memory: 50 clients stop reading streams the upstream sends as fast as it
// can, with a write timeout long enough that all of them stay stalled
// while memory is sampled; it is asserted to stay bounded (the upstream is
// not read while the client is not, so nothing piles up in Sluice). Time:
// one client at a time stops reading under write_timeout 1s; the time from
// its last read to its permit being freed is logged. Run with -v to see
// the numbers.
func TestSlowReaderCost(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	const n = 50
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = n, n
		p.Timeouts.Idle, p.Timeouts.Total = time.Minute, 10*time.Minute
	})
	cfg.Server.WriteTimeout = time.Minute
	s := startSluice(t, cfg)
	lim := s.srv.limiters.Limiter("fake")
	const hdr = "x-events: 1000000\r\nx-gap: 0s\r\n"
	// stall stalls n clients on addr and returns the heap and RSS growth
	// per stalled stream, and the permits held meanwhile.
	stall := func(addr string) (perHeap, perRSS int64, held int) {
		heap0, rss0 := heapAfterGC(), vmRSS()
		var conns []net.Conn
		for i := 0; i < n; i++ {
			conns = append(conns, slowClient(t, addr, 0, hdr))
		}
		time.Sleep(2 * time.Second) // every kernel buffer on the way is full
		heap1, rss1 := heapAfterGC(), vmRSS()
		held = lim.Stats().Inflight
		for _, c := range conns {
			c.Close()
		}
		testutil.Eventually(t, "every stream ended", 10*time.Second, func() bool { return lim.Stats().Inflight == 0 && up.inflight.Load() == 0 })
		return (int64(heap1) - int64(heap0)) / n, (rss1 - rss0) / n, held
	}
	// The fake upstream's own share, with clients stalled on it directly.
	upHeap, upRSS, _ := stall(up.ln.Addr().String())
	perHeap, perRSS, held := stall(addrOf(s.base))
	t.Logf("%d streams stalled through Sluice (%d holding permits): heap %+d KiB, RSS %+d KiB per stream for Sluice and the fake upstream together; "+
		"the upstream alone, stalled directly: heap %+d KiB, RSS %+d KiB; so Sluice: heap about %+d KiB, RSS about %+d KiB per stalled stream",
		n, held, perHeap>>10, perRSS>>10, upHeap>>10, upRSS>>10, (perHeap-upHeap)>>10, (perRSS-upRSS)>>10)
	if held != n {
		t.Fatalf("%d of %d stalled streams held permits", held, n)
	}
	if perHeap > 256<<10 {
		t.Fatalf("a stalled stream costs %d KiB of heap: something buffers it", perHeap>>10)
	}

	const wt = time.Second
	cfg.Server.WriteTimeout = wt
	if err := s.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	var took []time.Duration
	for i := 0; i < 5; i++ {
		c := slowClient(t, addrOf(s.base), 0, hdr)
		stopped := time.Now()
		testutil.Eventually(t, "permit freed", 30*time.Second, func() bool { return lim.Stats().Inflight == 0 })
		took = append(took, time.Since(stopped).Round(time.Millisecond))
		c.Close()
	}
	t.Logf("write_timeout %v: permit freed %v after the client's last read (the kernel buffers fill first)", wt, took)
}

// A stream served in-process (no client connection, as in benchmarks and
// embedding tests) runs past the point where the write deadline would move.
func TestInProcessStreamNeedsNoConnection(t *testing.T) {
	up := newFakeUpstream(t)
	base, ticks := time.Now(), 0
	s := New(Options{Now: func() time.Time { ticks++; return base.Add(time.Duration(ticks) * time.Second) }})
	cfg := testConfig(up.url(), nil)
	cfg.Server.WriteTimeout = time.Second
	if err := s.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ctx fasthttp.RequestCtx
	if code := serveOnce(t, s, &ctx, "x-events", "5", "x-gap", "0s"); code != 200 {
		t.Fatalf("status %d", code)
	}
}
