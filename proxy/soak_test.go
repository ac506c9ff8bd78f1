package proxy

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

// soakLong runs TestSoak with 100,000 requests:
//
//	go test -run 'TestSoak$' -v -timeout 60m ./proxy/ -args -soak.long
var soakLong = flag.Bool("soak.long", false, "TestSoak: send 100,000 requests instead of a few thousand")

// rawFaultUpstream is an upstream that misbehaves as the request's x-fault
// header says, with raw bytes (see faults_test.go).
func rawFaultUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if !rawFault(c, req.Header.Get("x-fault")) {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done; wg.Wait() })
	return "http://" + ln.Addr().String()
}

// rawFault answers one request with fault; it reports whether the
// connection may serve another.
func rawFault(c net.Conn, fault string) bool {
	switch fault {
	case "reset-before-headers":
		reset(c)
	case "reset-mid-stream":
		write(c, sseHead, chunk(roleEvent), chunk(tokEvent))
		reset(c)
	case "bad-chunking":
		write(c, sseHead, chunk(roleEvent), "zz\r\nnot a chunk\r\n")
		stall(c)
	case "malformed-sse":
		write(c, sseHead, chunk("data: {not json\n\n"), chunk(": comment\nevent: x\n\n"), chunk(tokEvent), chunk(doneEvent), "0\r\n\r\n")
		return true
	case "huge-line":
		write(c, sseHead, chunk(`data: {"choices":[{"index":0,"delta":{"content":"`+strings.Repeat("x", 256<<10)+`"}}]}`+"\n\n"), chunk(doneEvent), "0\r\n\r\n")
		return true
	case "html-503":
		write(c, rawAnswer("503 Service Unavailable", "text/html", "<html>down</html>", ""))
		return true
	case "overloaded-529":
		write(c, rawAnswer("529 Overloaded", "application/json", overloaded, "Retry-After: 1\r\n"))
		return true
	case "stall-first-token":
		write(c, sseHead, chunk(roleEvent))
		stall(c)
	case "stall-between-chunks":
		write(c, sseHead, chunk(roleEvent), chunk(tokEvent))
		stall(c)
	case "http10":
		write(c, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", roleEvent, tokEvent, doneEvent)
	default:
		write(c, sseHead, chunk(roleEvent), chunk(tokEvent), chunk(doneEvent), "0\r\n\r\n")
		return true
	}
	return false
}

// soakOp is one kind of request the soak sends; the faults come from the
// upstream (x-* headers), from the client (what it does with the
// connection), or both.
type soakOp struct {
	name string
	run  func(r *rand.Rand, sk *soak) string // returns the outcome seen
}

type soak struct {
	t    *testing.T
	base string
	addr string
	c    *http.Client
}

// post sends a stream request to provider prefix with hdr; the client
// leaves after leaveAfter (0: never) and reads nothing after the headers
// when stall is set.
func (sk *soak) post(prefix string, hdr map[string]string, body string, leaveAfter time.Duration, stall bool) string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if leaveAfter > 0 {
		time.AfterFunc(leaveAfter, cancel)
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", sk.base+prefix+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := sk.c.Do(req)
	if err != nil {
		return "client left"
	}
	defer resp.Body.Close()
	if stall {
		time.Sleep(400 * time.Millisecond) // past write_timeout, reading nothing
		return fmt.Sprintf("%d stalled", resp.StatusCode)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Sprintf("%d truncated", resp.StatusCode)
	}
	return fmt.Sprint(resp.StatusCode)
}

// raw sends bytes on a new connection, then does what then says.
func (sk *soak) raw(req string, then func(c net.Conn) string) string {
	c, err := net.Dial("tcp", sk.addr)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, req)
	return then(c)
}

func readStatus(c net.Conn) string {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "no answer"
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if err != nil {
		return fmt.Sprintf("%d truncated", resp.StatusCode)
	}
	return fmt.Sprint(resp.StatusCode)
}

const soakBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`

var soakOps = []soakOp{
	{"ok stream", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", map[string]string{"x-events": "3", "x-gap": "0s"}, soakBody, 0, false)
	}},
	{"ok json", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", map[string]string{"x-json": "1"}, soakBody, 0, false)
	}},
	{"big answer relayed", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", map[string]string{"x-json-size": fmt.Sprint(100<<10 + r.IntN(200<<10))}, soakBody, 0, false)
	}},
	{"upstream 429 Retry-After", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", map[string]string{"x-status": "429", "x-retry-after": "1"}, soakBody, 0, false)
	}},
	{"upstream dies mid-stream", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", map[string]string{"x-events": "4", "x-die-after": "1"}, soakBody, 0, false)
	}},
	{"upstream misses first token", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", map[string]string{"x-ttft": "300ms", "x-headers-late": fmt.Sprint(r.IntN(2))}, soakBody, 0, false)
	}},
	{"upstream idle mid-stream", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", map[string]string{"x-events": "3", "x-gap": "250ms"}, soakBody, 0, false)
	}},
	{"raw upstream fault", func(r *rand.Rand, sk *soak) string {
		faults := []string{"reset-before-headers", "reset-mid-stream", "bad-chunking", "malformed-sse", "huge-line", "html-503", "overloaded-529", "stall-first-token", "stall-between-chunks", "http10"}
		return sk.post("/raw", map[string]string{"x-fault": faults[r.IntN(len(faults))]}, soakBody, 0, false)
	}},
	{"client leaves", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", map[string]string{"x-events": "50", "x-gap": "5ms", "x-ttft": "20ms"}, soakBody, time.Duration(r.IntN(60))*time.Millisecond, false)
	}},
	{"client stops reading", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", map[string]string{"x-events": "100000", "x-gap": "0s"}, soakBody, 0, true)
	}},
	{"body over the limit", func(r *rand.Rand, sk *soak) string {
		return sk.post("/fake", nil, `{"pad":"`+strings.Repeat("x", 70<<10)+`"}`, 0, false)
	}},
	{"bad path, bad method, OPTIONS", func(r *rand.Rand, sk *soak) string {
		req := []string{"POST /fake/v1/%2e%2e/x", "TRACE /fake/v1/models", "OPTIONS /fake/v1/models", "POST /nowhere/v1/x"}[r.IntN(4)]
		return sk.raw(req+" HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", readStatus)
	}},
	{"body cut short", func(r *rand.Rand, sk *soak) string {
		return sk.raw("POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"model\"", func(c net.Conn) string { return "left" })
	}},
	{"bytes after the request, then gone", func(r *rand.Rand, sk *soak) string {
		return sk.raw("POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-ttft: 100ms\r\nContent-Length: 2\r\n\r\n{}", func(c net.Conn) string {
			time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
			io.WriteString(c, "GET /")
			return "left"
		})
	}},
	{"pipelined", func(r *rand.Rand, sk *soak) string {
		one := "POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-events: 2\r\nx-gap: 0s\r\nContent-Length: 2\r\n\r\n{}"
		return sk.raw(one+one, func(c net.Conn) string {
			br := bufio.NewReader(c)
			for i := 0; i < 2; i++ {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return "pipelined: no answer"
				}
				io.Copy(io.Discard, resp.Body)
			}
			return "pipelined 2x"
		})
	}},
}

// TestSoak sends thousands of requests (100,000 with -soak.long) through
// Sluice with random faults on both sides, upstream (resets, stalls at
// every stage, malformed SSE, huge lines, bad chunking, HTML error pages,
// 429/529, big answers) and client (leaving at any time, not reading,
// bodies over the limit or cut short, bad paths and methods, bytes after
// the request, pipelining). Afterwards: no permit in use, nobody queued,
// no buffered bytes, and goroutines and heap back near where they were.
func TestSoak(t *testing.T) {
	total := 3000
	switch {
	case *soakLong:
		total = 100000
	case testing.Short():
		total = 1000
	}
	fake := newFakeUpstream(t)
	raw := rawFaultUpstream(t)
	cfg := testConfig(fake.url(), func(p *config.Provider) {
		p.Limit.Algorithm, p.Limit.Cooldown = settings.AlgorithmAIMD, 0
		p.Limit.Ceiling, p.Limit.Initial, p.Limit.Min = 16, 16, 4
		p.Queue.MaxWaiting, p.Queue.MaxWait = 64, 300*time.Millisecond
		p.Timeouts.Connect, p.Timeouts.FirstToken = time.Second, 150*time.Millisecond
		p.Timeouts.Idle, p.Timeouts.Total = 100*time.Millisecond, 3*time.Second
	})
	rp := cfg.Providers[0]
	rp.Name, rp.Upstream, rp.Match.PathPrefix = "raw", raw, "/raw"
	cfg.Providers = append(cfg.Providers, rp)
	cfg.Server.MaxRequestBody, cfg.Server.MaxBufferedBytes = 64<<10, config.MiB
	cfg.Server.WriteTimeout, cfg.Server.ReadTimeout = 200*time.Millisecond, time.Second
	s := startSluice(t, cfg)
	sk := &soak{t: t, base: s.base, addr: addrOf(s.base), c: httpClient()}

	quiesce := func() {
		testutil.Eventually(t, "permits, queues, live requests, buffers and the upstream at 0", 30*time.Second, func() bool {
			for _, name := range []string{"fake", "raw"} {
				if st := s.srv.limiters.Limiter(name).Stats(); st.Inflight != 0 || st.Waiting != 0 {
					return false
				}
			}
			return s.srv.Live() == 0 && s.srv.BufferedBytes() == 0 && fake.inflight.Load() == 0
		})
		sk.c.CloseIdleConnections()
		s.srv.mu.Lock()
		for _, hc := range s.srv.clients {
			hc.CloseIdleConnections()
		}
		s.srv.mu.Unlock()
	}
	// Warm up every path once, so pools and lazily started goroutines
	// exist before the baseline.
	for _, op := range soakOps {
		op.run(rand.New(rand.NewPCG(1, 1)), sk)
	}
	quiesce()
	g0, h0 := settledGoroutines(0), heapAfterGCs()

	var next atomic.Int64
	var mu sync.Mutex
	byOp, seen := map[string]int{}, map[string]int{}
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 48; w++ {
		wg.Add(1)
		go func(seed uint64) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 9))
			for next.Add(1) <= int64(total) {
				op := soakOps[r.IntN(len(soakOps))]
				got := op.run(r, sk)
				mu.Lock()
				byOp[op.name]++
				seen[got]++
				mu.Unlock()
			}
		}(uint64(w))
	}
	wg.Wait()
	took := time.Since(start)
	quiesce()
	g1, h1 := settledGoroutines(g0+4), heapAfterGCs()
	faults := total - byOp["ok stream"] - byOp["ok json"]
	t.Logf("%d requests in %v, %d with an injected fault; by kind: %v", total, took.Round(time.Millisecond), faults, sortedCounts(byOp))
	t.Logf("client saw: %v", sortedCounts(seen))
	t.Logf("after: permits 0, queued 0, live 0, buffered 0; goroutines %d -> %d; heap %d KiB -> %d KiB", g0, g1, h0>>10, h1>>10)
	if g1 > g0+4 {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("goroutines %d -> %d: leaked\n%s", g0, g1, b.String())
	}
	if h1 > h0+8<<20 {
		t.Errorf("heap %d KiB -> %d KiB: not back near the baseline", h0>>10, h1>>10)
	}
}

// settledGoroutines waits (up to 10 s) for the number of goroutines to
// drop to at most limit (0: just to settle) and returns it. Idle fasthttp
// workers are not counted: a server keeps them for reuse for
// MaxIdleWorkerDuration (10 s) after a burst, by design.
func settledGoroutines(limit int) int {
	deadline := time.Now().Add(10 * time.Second)
	n := busyGoroutines()
	for time.Now().Before(deadline) && (limit == 0 || n > limit) {
		time.Sleep(50 * time.Millisecond)
		m := busyGoroutines()
		if limit == 0 && m == n {
			return n
		}
		n = m
	}
	return n
}

// busyGoroutines counts goroutines other than idle fasthttp workers.
func busyGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.SplitN(g, "\n", 3)
		if len(lines) >= 2 && strings.HasPrefix(lines[1], "github.com/valyala/fasthttp.(*workerPool).workerFunc(") {
			continue
		}
		count++
	}
	return count
}

// heapAfterGCs is the live heap after two collections: sync.Pools are
// emptied too, so what is left is held by something.
func heapAfterGCs() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, m[k])
	}
	return b.String()
}
