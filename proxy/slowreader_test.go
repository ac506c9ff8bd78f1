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

	"github.com/sluicehq/sluice/adaptive"
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

// stalled is what n stalled streams cost: heap and RSS growth per stream,
// the heap growth per stream over the last second of the stall, and the
// permits held meanwhile.
type stalled struct {
	perHeap, perRSS, perHeapLastSecond int64
	held                               int
}

// stallStreams stalls n clients that read nothing on streams from addr,
// which the upstream sends as fast as it can, waits until every kernel
// buffer on the way is full, and samples memory then and a second later;
// then it closes them and waits for every stream to end.
func stallStreams(t *testing.T, lim *adaptive.Limiter, up *fakeUpstream, addr string, n int) stalled {
	t.Helper()
	const hdr = "x-events: 1000000\r\nx-gap: 0s\r\n"
	heap0, rss0 := heapAfterGC(), vmRSS()
	var conns []net.Conn
	for i := 0; i < n; i++ {
		conns = append(conns, slowClient(t, addr, 0, hdr))
	}
	time.Sleep(time.Second) // every kernel buffer on the way is full
	heap1 := heapAfterGC()
	time.Sleep(time.Second)
	heap2, rss2 := heapAfterGC(), vmRSS()
	st := stalled{
		perHeap:           (int64(heap2) - int64(heap0)) / int64(n),
		perRSS:            (rss2 - rss0) / int64(n),
		perHeapLastSecond: (int64(heap2) - int64(heap1)) / int64(n),
		held:              lim.Stats().Inflight,
	}
	for _, c := range conns {
		c.Close()
	}
	testutil.Eventually(t, "every stream ended", 10*time.Second, func() bool { return lim.Stats().Inflight == 0 && up.inflight.Load() == 0 })
	return st
}

// slowReaderSluice is Sluice with room for n streams, a write timeout long
// enough that stalled streams stay stalled, and its fake upstream.
func slowReaderSluice(t *testing.T, n int) (*sluiceUnderTest, *config.Config, *fakeUpstream) {
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = n, n
		p.Timeouts.Idle, p.Timeouts.Total = time.Minute, 10*time.Minute
	})
	cfg.Server.WriteTimeout = time.Minute
	return startSluice(t, cfg), cfg, up
}

// Streams whose clients stop reading hold their permits while stalled
// (write_timeout is long), and cost bounded memory: the upstream is not
// read while the client is not, so nothing piles up in Sluice.
func TestStalledStreamsStayBounded(t *testing.T) {
	const n = 16
	s, _, up := slowReaderSluice(t, n)
	lim := s.srv.limiters.Limiter("fake")
	st := stallStreams(t, lim, up, addrOf(s.base), n)
	if st.held != n {
		t.Fatalf("%d of %d stalled streams held permits", st.held, n)
	}
	// The upstream sends as fast as it can: a stream that Sluice buffered
	// would grow by megabytes a second, and its total would pass any
	// constant. The bounds leave room for the race detector's larger heap
	// and for the process's own churn (the fake upstream, the GC's timing)
	// on a loaded machine: an order of magnitude below buffering.
	if st.perHeapLastSecond > 256<<10 {
		t.Errorf("a stalled stream's heap grows by %d KiB a second: something buffers it", st.perHeapLastSecond>>10)
	}
	if st.perHeap > 1<<20 {
		t.Errorf("a stalled stream costs %d KiB of heap: something buffers it", st.perHeap>>10)
	}
}

// What a stalled stream costs and how long it holds its permit, measured
// (make measure). Memory: 50 clients stop reading streams the upstream
// sends as fast as it can, with a write timeout long enough that all of
// them stay stalled while memory is sampled, compared with the same
// clients stalled on the upstream directly. Time: one client at a time
// stops reading under write_timeout 1s; the time from its last read to its
// permit being freed is logged. TestStalledStreamsStayBounded and
// TestSlowReaderIsCut assert the behaviour.
func TestSlowReaderCost(t *testing.T) {
	testutil.Measurement(t)
	const n = 50
	s, cfg, up := slowReaderSluice(t, n)
	lim := s.srv.limiters.Limiter("fake")
	// The fake upstream's own share, with clients stalled on it directly.
	alone := stallStreams(t, lim, up, up.ln.Addr().String(), n)
	st := stallStreams(t, lim, up, addrOf(s.base), n)
	upHeap, upRSS, perHeap, perRSS := alone.perHeap, alone.perRSS, st.perHeap, st.perRSS
	t.Logf("%d streams stalled through Sluice (%d holding permits): heap %+d KiB, RSS %+d KiB per stream for Sluice and the fake upstream together; "+
		"the upstream alone, stalled directly: heap %+d KiB, RSS %+d KiB; so Sluice: heap about %+d KiB, RSS about %+d KiB per stalled stream",
		n, st.held, perHeap>>10, perRSS>>10, upHeap>>10, upRSS>>10, (perHeap-upHeap)>>10, (perRSS-upRSS)>>10)

	const wt = time.Second
	cfg.Server.WriteTimeout = wt
	if err := s.srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	var took []time.Duration
	for i := 0; i < 5; i++ {
		c := slowClient(t, addrOf(s.base), 0, "x-events: 1000000\r\nx-gap: 0s\r\n")
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
