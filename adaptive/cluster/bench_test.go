package cluster

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/settings"
)

// BenchmarkStrictLease measures what strict mode adds to a request: the
// lease round trip in Permit.Lease (one Lua script against a real
// redis-server on loopback), between the local permit and forwarding. The
// release is sent off the request path. p50 and p99 are reported per
// request; "shared" is the same admission in the default mode, for scale.
func BenchmarkStrictLease(b *testing.B) {
	rs := startRedis(b)
	for _, mode := range []string{settings.FleetShared, settings.FleetStrict} {
		for _, par := range []int{1, 16} {
			b.Run(mode+"/clients="+strconv.Itoa(par), func(b *testing.B) {
				c := newTestClient(rs.addr())
				defer c.Close()
				co, err := New(Options{Client: c, ReplicaID: "bench", KeyPrefix: "bench-" + mode, Settings: fleetSettings(time.Second, 10*time.Second),
					Limiters: benchLimiters(mode)})
				if err != nil {
					b.Fatal(err)
				}
				co.Attach()
				co.provs["p"].lim.SetFleetCap(0)
				lim := co.provs["p"].lim
				// Past the rebuild window of a fresh key space.
				if mode == settings.FleetStrict {
					var p adaptive.Permit
					lim.TryAcquire(time.Now(), adaptive.Flow{}, &p)
					if err := p.Lease(nil); err != nil {
						b.Fatal(err)
					}
					p.Finish(time.Now(), adaptive.Outcome{})
				}
				lat := make([][]time.Duration, par)
				b.ResetTimer()
				var wg sync.WaitGroup
				for w := range par {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var p adaptive.Permit
						for i := w; i < b.N; i += par {
							start := time.Now()
							if !lim.TryAcquire(start, adaptive.Flow{}, &p) {
								b.Error("no local permit")
								return
							}
							if err := p.Lease(nil); err != nil {
								b.Error(err)
								return
							}
							lat[w] = append(lat[w], time.Since(start))
							p.Finish(time.Now(), adaptive.Outcome{})
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				all := slices.Concat(lat...)
				slices.Sort(all)
				if len(all) > 0 {
					b.ReportMetric(float64(all[len(all)/2])/1e3, "p50-µs")
					b.ReportMetric(float64(all[len(all)*99/100])/1e3, "p99-µs")
				}
				drain(co)
			})
		}
	}
}

// drain sends the queued releases (the coordinator is not running).
func drain(co *Coordinator) {
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	co.drainReleases(ctx)
}

func benchLimiters(mode string) func() map[string]*adaptive.Limiter {
	reg := adaptive.NewRegistry(nil)
	set := limiterSettings(settings.AlgorithmFixed, mode, 100000)
	if _, err := reg.Reconcile(map[string]adaptive.LimiterSettings{"p": set}); err != nil {
		panic(err)
	}
	return reg.Limiters
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
