package fleet

import (
	"fmt"
	"strings"
	"time"
)

// RPMBound is the most requests a fleet-wide rate.rpm lets through in
// elapsed: the bucket (RPM x RequestWindow / 1m, at least 1) plus its
// refill.
func RPMBound(c Config, elapsed time.Duration) int {
	w := c.RequestWindow
	if w <= 0 {
		w = time.Minute
	}
	burst := max(int(int64(c.RPM)*int64(w)/int64(time.Minute)), 1)
	return burst + int(float64(c.RPM)*elapsed.Minutes())
}

// Summary describes a run's result in a few lines.
func Summary(c Config, r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "provider peak in flight: %d (ceiling %d)\n", r.PeakProvider, c.Ceiling)
	if c.KillAt > 0 {
		fmt.Fprintf(&b, "  before the kill: %d; after it: %d\n", r.PeakBeforeKill, r.PeakAfterKill)
		fmt.Fprintf(&b, "killed replica's permits back in use after %.1fs (lease_ttl %s)\n", r.RecoveredAfterKill.Seconds(), c.LeaseTTL)
	}
	if c.KillAt == 0 && c.RedisDownAt == 0 && c.FreezeAt == 0 && c.RPM == 0 {
		if f := FillOf(c, r); f.Samples > 0 {
			fmt.Fprintf(&b, "provider in flight from %.1fs on: mean %.1f, p10 %d (ceiling %d, %d samples); over the ceiling %.1f%%, over 110%% %.1f%% of the samples from 1s on\n",
				f.Settle.Seconds(), f.Mean, f.P10, c.Ceiling, f.Samples, 100*f.Over, 100*f.Over110)
		}
	}
	if c.Mode == "shared" && len(r.Samples) > 0 {
		sum := make([]float64, len(c.Clients))
		total, over, n := 0.0, 0, 0
		for _, s := range r.Samples {
			if s.At < 3*c.Heartbeat+1e9 { // settle
				continue
			}
			n++
			if s.Provider > c.Ceiling {
				over++
			}
			for i, x := range s.Inflight {
				if x > 0 {
					sum[i] += float64(x)
					total += float64(x)
				}
			}
		}
		if n > 0 && total > 0 {
			fmt.Fprintf(&b, "samples over the ceiling: %d of %d (100 ms apart)\nshare of the permits in use:", over, n)
			for i := range sum {
				fmt.Fprintf(&b, " r%d %.0f%% (%d clients)", i+1, 100*sum[i]/total, c.Clients[i])
			}
			b.WriteString("\n")
		}
	}
	if c.RedisDownAt > 0 {
		fmt.Fprintf(&b, "while Redis was down: max in flight per replica %v, caps %v\n", r.MaxInflightDegraded, r.CapDegraded)
		fmt.Fprintf(&b, "coordination resumed %.1fs after Redis came back\n", r.ResumedAfter.Seconds())
	}
	if c.FreezeAt > 0 {
		fmt.Fprintf(&b, "429 Retry-After %s seen by r1 at t=%.1fs; frozen after r1 by", c.RetryAfter, r.FreezeSent.Seconds())
		for i, d := range r.Frozen {
			fmt.Fprintf(&b, " r%d %dms", i+1, d.Milliseconds())
		}
		fmt.Fprintf(&b, " (sampled every 100 ms)\nloss part at the freeze %v, just before it ends %v; rose during the freeze: %v\n", r.LossAtFreeze, r.LossAtThaw, r.LimitRose)
		fmt.Fprintf(&b, "loss part at the end of the run (growing again): %v\n", r.Samples[len(r.Samples)-1].Loss)
	}
	if c.RPM > 0 && r.Elapsed > 0 {
		w := c.RequestWindow
		if w <= 0 {
			w = time.Minute
		}
		burst := max(int(int64(c.RPM)*int64(w)/int64(time.Minute)), 1)
		fmt.Fprintf(&b, "provider received %d requests in %.1fs: %.0f per minute; rate.rpm %d fleet-wide (bucket %d per %s): at most %d in the run\n",
			r.ProviderRequests, r.Elapsed.Seconds(), float64(r.ProviderRequests)/r.Elapsed.Minutes(), c.RPM, burst, w, RPMBound(c, r.Elapsed))
		fmt.Fprintf(&b, "rate syncs per replica: ok %v, failed %v\n", r.RateSyncs, r.RateSyncFailures)
	}
	fmt.Fprintf(&b, "requests per replica: ok %v, rejected %v, failed %v\n", r.OK, r.Rejected, r.Failed)
	return b.String()
}
