package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// fakeUpstream is an in-process provider on loopback. Tests steer each
// request with headers and assert from inside (in-flight counts, headers).
type fakeUpstream struct {
	ln       net.Listener
	srv      *fasthttp.Server
	inflight atomic.Int64
	maxSeen  atomic.Int64
	requests atomic.Int64
	mu       sync.Mutex
	lastReq  *fasthttp.RequestHeader
	lastURI  string
	lastBody []byte
	arrivals []time.Time   // when each request arrived
	ended    chan struct{} // receives when a request handler/stream ends
	stop     chan struct{} // closed at cleanup: every pause ends
}

// pause sleeps d, or until the test ends or the connection c is closed by
// its peer (as a provider aborts a request whose client left). It reports
// whether the connection is still usable.
func (f *fakeUpstream) pause(d time.Duration, c net.Conn) bool {
	if d <= 0 {
		return true
	}
	fd := connFD(c)
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-f.stop:
			return false
		case <-tick.C:
			if fd >= 0 && peerClosed(fd) {
				return false
			}
		}
	}
}

// Request headers understood by the fake:
//
//	x-events: number of SSE events to send (default 3)
//	x-gap: pause between events (default 1ms)
//	x-ttft: pause before the first event (default 0)
//	x-headers-late: "1" sends headers only with the first event
//	x-die-after: close the connection after this many events
//	x-status: answer this status with a JSON error body (rate_limit_exceeded)
//	x-quota: "1" makes that body insufficient_quota
//	x-retry-after: Retry-After value sent with x-status
//	x-json: "1" answers a non-streaming JSON body
//	x-json-size: answers a JSON body of this many bytes (padding)
func newFakeUpstream(t *testing.T) *fakeUpstream {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeUpstream{ln: ln, ended: make(chan struct{}, 100000), stop: make(chan struct{})}
	f.srv = &fasthttp.Server{Handler: f.handle, CloseOnShutdown: true, Logger: quietLogger{}}
	go f.srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() {
		close(f.stop)
		_ = f.srv.Shutdown()
	})
	return f
}

func (f *fakeUpstream) url() string { return "http://" + f.ln.Addr().String() }

func (f *fakeUpstream) enter() {
	n := f.inflight.Add(1)
	f.requests.Add(1)
	for {
		m := f.maxSeen.Load()
		if n <= m || f.maxSeen.CompareAndSwap(m, n) {
			return
		}
	}
}

func (f *fakeUpstream) leave() {
	f.inflight.Add(-1)
	f.ended <- struct{}{}
}

func hdrInt(ctx *fasthttp.RequestCtx, k string, def int) int {
	if v := ctx.Request.Header.Peek(k); len(v) > 0 {
		n, err := strconv.Atoi(string(v))
		if err == nil {
			return n
		}
	}
	return def
}

func hdrDur(ctx *fasthttp.RequestCtx, k string, def time.Duration) time.Duration {
	if v := ctx.Request.Header.Peek(k); len(v) > 0 {
		d, err := time.ParseDuration(string(v))
		if err == nil {
			return d
		}
	}
	return def
}

func (f *fakeUpstream) handle(ctx *fasthttp.RequestCtx) {
	f.enter()
	f.mu.Lock()
	h := &fasthttp.RequestHeader{}
	ctx.Request.Header.CopyTo(h)
	f.lastReq = h
	f.lastURI = string(ctx.RequestURI())
	f.lastBody = append([]byte(nil), ctx.PostBody()...)
	f.arrivals = append(f.arrivals, time.Now())
	f.mu.Unlock()

	if st := hdrInt(ctx, "x-status", 0); st != 0 {
		defer f.leave()
		f.pause(hdrDur(ctx, "x-ttft", 0), ctx.Conn())
		ctx.SetStatusCode(st)
		ctx.SetContentType("application/json")
		if ra := ctx.Request.Header.Peek("x-retry-after"); len(ra) > 0 {
			ctx.Response.Header.SetBytesV("Retry-After", ra)
		}
		if hdrInt(ctx, "x-quota", 0) == 1 {
			ctx.SetBodyString(`{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`)
			return
		}
		ctx.SetBodyString(`{"error":{"message":"busy","type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
		return
	}
	if n := hdrInt(ctx, "x-json-size", 0); n > 0 {
		defer f.leave()
		ctx.SetContentType("application/json")
		ctx.SetBodyStream(&jsonPad{left: n}, n)
		return
	}
	if hdrInt(ctx, "x-json", 0) == 1 {
		defer f.leave()
		f.pause(hdrDur(ctx, "x-ttft", 0), ctx.Conn())
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
		return
	}
	events := hdrInt(ctx, "x-events", 3)
	gap := hdrDur(ctx, "x-gap", time.Millisecond)
	ttft := hdrDur(ctx, "x-ttft", 0)
	dieAfter := hdrInt(ctx, "x-die-after", -1)
	if hdrInt(ctx, "x-headers-late", 0) == 1 {
		if !f.pause(ttft, ctx.Conn()) {
			f.leave()
			return
		}
		ttft = 0
	}
	ctx.SetContentType("text/event-stream")
	ctx.Response.ImmediateHeaderFlush = true
	conn := ctx.Conn()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer f.leave()
		if !f.pause(ttft, conn) {
			return
		}
		if _, err := w.WriteString("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"); err != nil {
			return
		}
		if w.Flush() != nil {
			return
		}
		for i := 0; i < events; i++ {
			if i == dieAfter {
				// Returning early would end the body cleanly; kill the
				// connection instead, as a crashed provider would.
				_ = conn.Close()
				return
			}
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
			if w.Flush() != nil {
				return
			}
			if !f.pause(gap, conn) {
				return
			}
		}
		_, _ = w.WriteString("data: [DONE]\n\n")
		_ = w.Flush()
	})
}

// testConfig returns a one-provider config in front of upstream.
func testConfig(upstream string, mut func(p *config.Provider)) *config.Config {
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	p := config.DefaultProvider()
	p.Name = "fake"
	p.Upstream = upstream
	p.Match.PathPrefix = "/fake"
	p.Limit.Algorithm = settings.AlgorithmFixed
	p.Limit.Ceiling = 4
	p.Limit.Initial = 4
	p.Limit.Min = 1
	if mut != nil {
		mut(&p)
	}
	cfg.Providers = []config.Provider{p}
	return cfg
}

type sluiceUnderTest struct {
	srv  *Server
	fs   *fasthttp.Server
	ln   net.Listener
	base string
}

// startSluice serves cfg, changed by muts, on a loopback listener.
func startSluice(t *testing.T, cfg *config.Config, muts ...func(*config.Config)) *sluiceUnderTest {
	t.Helper()
	return startSluiceOn(t, cfg, func(ln net.Listener) net.Listener { return ln }, muts...)
}

// startSluiceOn is startSluice on the loopback listener wrap returns.
func startSluiceOn(t *testing.T, cfg *config.Config, wrap func(net.Listener) net.Listener, muts ...func(*config.Config)) *sluiceUnderTest {
	t.Helper()
	for _, m := range muts {
		m(cfg)
	}
	s := New(Options{})
	if err := s.Apply(cfg); err != nil {
		t.Fatalf("apply: %v", err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln = wrap(ln)
	fs := NewFastHTTPServer(s)
	go fs.Serve(ln) //nolint:errcheck
	u := &sluiceUnderTest{srv: s, fs: fs, ln: ln, base: "http://" + ln.Addr().String()}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = fs.ShutdownWithContext(ctx)
		s.CutStreams()
		// Every permit any request took is released once, whatever way
		// it ended: after shutdown nothing is in flight anywhere.
		deadline := time.Now().Add(5 * time.Second)
		for leaked := permitsHeld(s); leaked != ""; leaked = permitsHeld(s) {
			if time.Now().After(deadline) {
				t.Errorf("after shutdown: %s", leaked)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		s.Close()
	})
	return u
}

// httpClient returns a client with its own connection pool.
func httpClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000, DisableCompression: true}}
}

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// drainBuf is serveOnce's read buffer; package-level so that draining does
// not show up in allocation counts. Tests that use it run sequentially.
var drainBuf = make([]byte, 32<<10)

// serveOnce sends one POST through s.Handler in-process (no listener), with
// the given request headers, and for a stream does what fasthttp does after
// the handler returns: reads the body stream to its end, then closes it
// (Response.Reset calls CloseWithError). It returns the status code.
func serveOnce(tb testing.TB, s *Server, ctx *fasthttp.RequestCtx, hdr ...string) int {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.SetRequestURI("/fake/v1/chat/completions")
	ctx.Request.Header.SetMethod("POST")
	ctx.Request.Header.SetHost("sluice.local")
	ctx.Request.Header.SetContentType("application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		ctx.Request.Header.Set(hdr[i], hdr[i+1])
	}
	ctx.Request.SetBodyString(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	s.Handler(ctx)
	if r := ctx.Response.BodyStream(); r != nil {
		for {
			if _, err := r.Read(drainBuf); err != nil {
				if err != io.EOF {
					tb.Fatalf("body stream: %v", err)
				}
				break
			}
		}
	}
	code := ctx.Response.StatusCode()
	ctx.Response.Reset()
	return code
}

// jsonPad is a JSON object of exactly left bytes: {"pad":"xxx...x"}.
type jsonPad struct{ left, off int }

var padX = bytes.Repeat([]byte("x"), 32<<10)

func (j *jsonPad) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && j.left > 0 {
		var src []byte
		switch {
		case j.off < 8:
			src = []byte(`{"pad":"`)[j.off:]
		case j.left <= 2:
			src = []byte(`"}`)[2-j.left:]
		default:
			src = padX[:min(len(padX), j.left-2)]
		}
		c := copy(p[n:], src)
		n += c
		j.off += c
		j.left -= c
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// permitsHeld says which provider still holds permits or live streams
// ("" when none does).
func permitsHeld(s *Server) string {
	if n := s.Live(); n != 0 {
		return fmt.Sprintf("%d streams still live", n)
	}
	for name, l := range s.Limiters() {
		if n := l.Stats().Inflight; n != 0 {
			return fmt.Sprintf("provider %s holds %d permits", name, n)
		}
	}
	return ""
}
