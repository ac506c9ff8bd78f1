package proxy

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// benchUpstream answers instantly: a small JSON body, or an SSE stream of
// 10 events written as one chunk each.
func benchUpstream(b *testing.B) string {
	b.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	jsonBody := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	srv := &fasthttp.Server{Logger: quietLogger{}, Handler: func(ctx *fasthttp.RequestCtx) {
		if len(ctx.Request.Header.Peek("x-sse")) == 0 {
			ctx.SetContentType("application/json")
			ctx.SetBody(jsonBody)
			return
		}
		ctx.SetContentType("text/event-stream")
		ctx.SetBodyStream(&sseBody{}, -1)
	}}
	go srv.Serve(ln) //nolint:errcheck
	b.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

var sseEvents = func() [][]byte {
	var ev [][]byte
	ev = append(ev, []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"))
	for i := 0; i < 10; i++ {
		ev = append(ev, []byte(fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)))
	}
	return append(ev, []byte("data: [DONE]\n\n"))
}()

type sseBody struct{ i int }

func (s *sseBody) Read(p []byte) (int, error) {
	if s.i >= len(sseEvents) {
		return 0, io.EOF
	}
	n := copy(p, sseEvents[s.i])
	s.i++
	return n, nil
}

// serveSluice starts a Server with opts and cfg on a loopback listener for a
// benchmark and returns its address; cleanup stops both.
func serveSluice(b *testing.B, opts Options, cfg *config.Config) string {
	b.Helper()
	s := New(opts)
	if err := s.Apply(cfg); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	fs := NewFastHTTPServer(s)
	go fs.Serve(ln) //nolint:errcheck
	b.Cleanup(func() { _ = fs.Shutdown(); s.Close() })
	return ln.Addr().String()
}

// BenchmarkProxyOverhead measures requests through Sluice against the same
// requests sent to the upstream directly, side by side in one run on
// loopback, with 2 and 16 concurrent clients (RunParallel's unit is
// GOMAXPROCS goroutines; this machine has 2 cores). Reported: ns/op (inverse
// throughput), allocs/op of the whole process (client + Sluice + upstream),
// and per-request latency p50/p99 in microseconds.
//
//	go test -run NONE -bench ProxyOverhead -benchmem ./proxy/
func BenchmarkProxyOverhead(b *testing.B) {
	upAddr := benchUpstream(b)
	cfg := testConfig("http://"+upAddr, func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = 1000, 1000
		p.Queue.MaxWaiting = 10000
	})
	sluiceAddr := serveSluice(b, Options{}, cfg)

	for _, conc := range []int{2, 16} {
		for _, kind := range []string{"json", "sse"} {
			for _, via := range []struct{ name, addr, prefix string }{
				{"direct", upAddr, ""},
				{"sluice", sluiceAddr, "/fake"},
			} {
				b.Run(fmt.Sprintf("c%d/%s/%s", conc, kind, via.name), func(b *testing.B) {
					c := &fasthttp.HostClient{Addr: via.addr, MaxConns: 64, StreamResponseBody: false}
					uri := "http://" + via.addr + via.prefix + "/v1/chat/completions"
					body := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
					var mu sync.Mutex
					var lat []time.Duration
					// RunParallel starts parallelism x GOMAXPROCS clients.
					b.SetParallelism(max(1, conc/runtime.GOMAXPROCS(0)))
					b.ReportAllocs()
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
						defer fasthttp.ReleaseRequest(req)
						defer fasthttp.ReleaseResponse(resp)
						local := make([]time.Duration, 0, 1024)
						for pb.Next() {
							req.SetRequestURI(uri)
							req.Header.SetMethod("POST")
							req.Header.SetContentType("application/json")
							if kind == "sse" {
								req.Header.Set("x-sse", "1")
							}
							req.SetBodyRaw(body)
							t0 := time.Now()
							if err := c.Do(req, resp); err != nil {
								b.Error(err)
								return
							}
							local = append(local, time.Since(t0))
							if resp.StatusCode() != 200 {
								b.Errorf("status %d: %s", resp.StatusCode(), resp.Body())
								return
							}
						}
						mu.Lock()
						lat = append(lat, local...)
						mu.Unlock()
					})
					b.StopTimer()
					if len(lat) > 0 {
						sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
						b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
						b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
					}
				})
			}
		}
	}
}

// BenchmarkHandlerAllocs drives the proxy handler for one request at a time
// (no client concurrency), to count what one proxied request allocates in
// Sluice's own process path.
func BenchmarkHandlerAllocs(b *testing.B) {
	upAddr := benchUpstream(b)
	s := New(Options{})
	if err := s.Apply(testConfig("http://"+upAddr, nil)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	benchServeKinds(b, s, "")
}

// benchServeKinds runs one sub-benchmark per request kind (a JSON answer,
// a stream), named prefix+kind, each serving one request at a time
// through s with serveOnce.
func benchServeKinds(b *testing.B, s *Server, prefix string, extra ...string) {
	for _, kind := range []string{"json", "sse"} {
		b.Run(prefix+kind, func(b *testing.B) {
			var ctx fasthttp.RequestCtx
			hdr := append([]string{}, extra...)
			if kind == "sse" {
				hdr = append(hdr, "x-sse", "1")
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if code := serveOnce(b, s, &ctx, hdr...); code != 200 {
					b.Fatalf("status %d", code)
				}
			}
		})
	}
}

// BenchmarkHandlerByAlgorithm is BenchmarkHandlerAllocs with the limit
// never binding (ceiling = initial = min = 1000), once with algorithm fixed
// and once with gradient2 (the default), so that what the controller costs
// a request is read side by side in one run:
//
//	go test -run NONE -bench HandlerByAlgorithm -count 6 ./proxy/
func BenchmarkHandlerByAlgorithm(b *testing.B) {
	upAddr := benchUpstream(b)
	for _, algo := range []string{settings.AlgorithmFixed, settings.AlgorithmGradient2} {
		s := New(Options{})
		if err := s.Apply(testConfig("http://"+upAddr, func(p *config.Provider) {
			p.Limit.Algorithm = algo
			p.Limit.Ceiling, p.Limit.Initial, p.Limit.Min = 1000, 1000, 1000
		})); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		benchServeKinds(b, s, algo+"/")
	}
}

// BenchmarkHandlerClients is BenchmarkHandlerAllocs for a client that
// sends an API key, side by side: without a clients: block, with 1,000
// entries and a key none of them lists, and with the key listed (its
// entry with rpm, tpm and max_inflight, so its quota and cap are used):
//
//	go test -run NONE -bench HandlerClients -count 6 ./proxy/
func BenchmarkHandlerClients(b *testing.B) {
	upAddr := benchUpstream(b)
	const key = "sk-bench-0123456789abcdef0123456789abcdef"
	clients := settings.Clients{}
	for i := range 1000 {
		clients.Entries = append(clients.Entries, settings.Client{
			Name: fmt.Sprintf("client-%d", i), KeySHA256: []string{keySHA(fmt.Sprintf("sk-client-%d", i))},
		})
	}
	listed := clients
	listed.Entries = append(append([]settings.Client(nil), clients.Entries...), settings.Client{
		Name: "bench", KeySHA256: []string{keySHA(key)},
		ClientPolicy: settings.ClientPolicy{PerMinute: settings.PerMinute{RPM: 100_000_000, TPM: 10_000_000_000}, MaxInflight: 1000},
	})
	for _, tc := range []struct {
		name    string
		clients settings.Clients
	}{{"none", settings.Clients{}}, {"1000-unknown", clients}, {"1000-listed", listed}} {
		s := New(Options{})
		cfg := testConfig("http://"+upAddr, nil)
		cfg.Clients = tc.clients
		if err := s.Apply(cfg); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		benchServeKinds(b, s, tc.name+"/", "Authorization", "Bearer "+key)
	}
}

// BenchmarkIdentify is what matching a client costs a request: one
// SHA-256 of its key and one lookup among 1,000 entries ("match"), next to
// the SHA-256 alone, which a request with a key paid before clients:
// existed (its tenant is the hash of its key):
//
//	go test -run NONE -bench Identify -count 6 ./proxy/
func BenchmarkIdentify(b *testing.B) {
	c := settings.Clients{}
	for i := range 1000 {
		c.Entries = append(c.Entries, settings.Client{Name: fmt.Sprintf("c-%d", i), KeySHA256: []string{keySHA(fmt.Sprintf("sk-%d", i))}})
	}
	cr := newClientRules(c)
	var h fasthttp.RequestHeader
	h.Set("Authorization", "Bearer sk-500")
	b.Run("sha256", func(b *testing.B) {
		b.ReportAllocs()
		var sum [32]byte
		for b.Loop() {
			sum = sha256.Sum256(credential(&h))
		}
		_ = sum
	})
	b.Run("match", func(b *testing.B) {
		var id identity
		b.ReportAllocs()
		for b.Loop() {
			cr.identify(&h, &id)
		}
		if id.pol.name != "c-500" {
			b.Fatalf("matched %q", id.pol.name)
		}
	})
}
