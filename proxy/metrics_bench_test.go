package proxy

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluicehq/sluice/config"
)

// BenchmarkTelemetryOverhead runs the same load through four Sluice
// instances in one process: telemetry off, metrics only, metrics + tracing
// sampled at 1%, metrics + tracing sampling every request. Tracing uses the
// TracerProvider NewTracerProvider builds (Sluice decides sampling first);
// spans go through the SDK's batch processor to an exporter that discards
// them (export itself is the collector's cost, off the request path).
//
// The variants take turns in short slices (200 ms each, order rotated every
// round) with 16 concurrent clients on loopback, so that load from other
// processes on a shared machine hits all of them alike; b.N is the number
// of rounds. For each variant it reports throughput relative to "off" (the
// median over rounds of the ratio within a round), CPU time of the whole
// process per request (client, Sluice and upstream share the cores), the
// process's allocations per request and latency p50/p99. -v prints the
// table.
//
//	go test -run NONE -bench TelemetryOverhead -benchtime 40x -v ./proxy/
func BenchmarkTelemetryOverhead(b *testing.B) {
	upAddr := benchUpstream(b)
	cfg := testConfig("http://"+upAddr, func(p *config.Provider) {
		p.Limit.Ceiling, p.Limit.Initial = 1000, 1000
		p.Queue.MaxWaiting = 10000
	})
	newTP := func(ratio float64) *TracerProvider {
		tp := NewTracerProvider(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	variants := []struct {
		name string
		opts Options
	}{
		{"off", Options{}},
		{"metrics", Options{Metrics: newTestMetrics(b)}},
		{"metrics+trace0.01", Options{Metrics: newTestMetrics(b), TracerProvider: newTP(0.01)}},
		{"metrics+traceall", Options{Metrics: newTestMetrics(b), TracerProvider: newTP(1)}},
	}
	addrs := make([]string, len(variants))
	for i, v := range variants {
		addrs[i] = serveSluice(b, v.opts, cfg)
	}
	const clients, slice = 16, 200 * time.Millisecond

	for _, kind := range []string{"json", "sse"} {
		b.Run(kind, func(b *testing.B) {
			type acc struct {
				reqs, mallocs uint64
				cpu, wall     time.Duration
				lat           []time.Duration
				ratios        []float64 // throughput / off's, per round
			}
			res := make([]acc, len(variants))
			hcs := make([]*fasthttp.HostClient, len(variants))
			for i, a := range addrs {
				hcs[i] = &fasthttp.HostClient{Addr: a, MaxConns: 64}
			}
			run := func(i int) (reqs uint64, wall time.Duration) {
				uri := "http://" + addrs[i] + "/fake/v1/chat/completions"
				body := []byte(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				cpu0, t0 := processCPU(), time.Now()
				deadline := t0.Add(slice)
				var wg sync.WaitGroup
				var mu sync.Mutex
				for c := 0; c < clients; c++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
						defer fasthttp.ReleaseRequest(req)
						defer fasthttp.ReleaseResponse(resp)
						local := make([]time.Duration, 0, 4096)
						for time.Now().Before(deadline) {
							req.SetRequestURI(uri)
							req.Header.SetMethod("POST")
							req.Header.SetContentType("application/json")
							if kind == "sse" {
								req.Header.Set("x-sse", "1")
							}
							req.SetBodyRaw(body)
							s := time.Now()
							if err := hcs[i].Do(req, resp); err != nil || resp.StatusCode() != 200 {
								b.Errorf("%s: %v %d", variants[i].name, err, resp.StatusCode())
								return
							}
							local = append(local, time.Since(s))
						}
						mu.Lock()
						res[i].lat = append(res[i].lat, local...)
						reqs += uint64(len(local))
						mu.Unlock()
					}()
				}
				wg.Wait()
				wall = time.Since(t0)
				runtime.ReadMemStats(&ms1)
				res[i].reqs += reqs
				res[i].wall += wall
				res[i].cpu += processCPU() - cpu0
				res[i].mallocs += ms1.Mallocs - ms0.Mallocs
				return reqs, wall
			}
			for i := range variants { // warm up connections and pools
				run(i)
				res[i] = acc{}
			}
			b.ResetTimer()
			for round := 0; round < b.N; round++ {
				thr := make([]float64, len(variants))
				for k := range variants {
					i := (k + round) % len(variants)
					n, wall := run(i)
					thr[i] = float64(n) / wall.Seconds()
				}
				for i := range variants {
					res[i].ratios = append(res[i].ratios, thr[i]/thr[0])
				}
			}
			b.StopTimer()
			b.Logf("%-18s %9s %15s %11s %9s %8s %8s", "variant", "req/s", "thr vs off", "cpu-us/req", "allocs", "p50-us", "p99-us")
			for i, v := range variants {
				r := &res[i]
				sort.Slice(r.lat, func(x, y int) bool { return r.lat[x] < r.lat[y] })
				sort.Float64s(r.ratios)
				med := r.ratios[len(r.ratios)/2]
				q1, q3 := r.ratios[len(r.ratios)/4], r.ratios[len(r.ratios)*3/4]
				rps := float64(r.reqs) / r.wall.Seconds()
				cpu := float64(r.cpu.Microseconds()) / float64(r.reqs)
				allocs := float64(r.mallocs) / float64(r.reqs)
				p50, p99 := r.lat[len(r.lat)/2].Microseconds(), r.lat[len(r.lat)*99/100].Microseconds()
				b.Logf("%-18s %9.0f %5.3f [%.2f-%.2f] %11.1f %9.1f %8d %8d", v.name, rps, med, q1, q3, cpu, allocs, p50, p99)
				b.ReportMetric(med, v.name+"-thr-ratio")
				b.ReportMetric(cpu, v.name+"-cpu-us/req")
			}
		})
	}
}

// processCPU returns the user+system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTelemetryHandlerAllocs counts what one request allocates in the
// handler path (no client, no network concurrency) with each telemetry
// variant: metrics must add nothing; an unsampled trace only the SDK's
// span and context.
//
//	go test -run NONE -bench TelemetryHandlerAllocs -benchmem ./proxy/
func BenchmarkTelemetryHandlerAllocs(b *testing.B) {
	upAddr := benchUpstream(b)
	newTP := func(ratio float64) *TracerProvider {
		tp := NewTracerProvider(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	for _, v := range []struct {
		name string
		opts Options
	}{
		{"off", Options{}},
		{"metrics", Options{Metrics: newTestMetrics(b)}},
		{"metrics+unsampled", Options{Metrics: newTestMetrics(b), TracerProvider: newTP(0)}},
		{"metrics+sampled", Options{Metrics: newTestMetrics(b), TracerProvider: newTP(1)}},
	} {
		s := New(v.opts)
		if err := s.Apply(testConfig("http://"+upAddr, nil)); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		benchServeKinds(b, s, v.name+"/")
	}
}

// BenchmarkModelTokens is the model label's lookup of a known model at the
// end of each successful answer, from every core at once: a lock-free map
// read and the count of the answer that keeps the model's place.
//
//	go test -run NONE -bench ModelTokens -benchmem ./proxy/
func BenchmarkModelTokens(b *testing.B) {
	m := newTestMetrics(b)
	pm := m.forProvider("p")
	now := time.Now()
	for i := range 8 {
		pm.modelTokens(fmt.Sprintf("model-%d", i), now)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			pm.modelTokens("model-3", now).out.Add(1)
		}
	})
}
