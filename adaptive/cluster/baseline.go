package cluster

import (
	"strconv"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/adaptive/control"
)

// Sharing the learned TTFT baseline: every heartbeat publishes, per
// provider, the baseline this replica's controller learned (nothing while
// it is cold), and reads the others'. A replica whose controller is cold
// (it just started, or a reload rebuilt it) seeds it with the median of
// the live replicas' baselines (adaptive.Limiter.SeedBaseline), so its
// first window is judged against what the fleet learned instead of
// becoming the reference whatever load it ran at. The seed is one window
// among those the baseline is the median of: the replica's own
// measurements replace it (see adaptive.BaselineSharer).

// formatBaseline is the heartbeat's baseline value for lim: "ttft_ns
// noise_ns load token_rate samples", or "" while it has none.
func formatBaseline(lim *adaptive.Limiter) string {
	b, ok := lim.Baseline()
	if !ok {
		return ""
	}
	return strconv.FormatInt(int64(b.TTFT), 10) + " " + strconv.FormatInt(int64(b.Noise), 10) + " " +
		strconv.FormatFloat(b.Load, 'g', 6, 64) + " " + strconv.FormatFloat(b.TokenRate, 'g', 6, 64) + " " +
		strconv.Itoa(b.Samples)
}

// parseBaselines reads a baseline hash (flat: id, value), skipping
// malformed values.
func parseBaselines(v any) map[string]control.Baseline {
	out := map[string]control.Baseline{}
	eachFlatField(v, 5, func(id string, f []string) {
		ttft, e1 := strconv.ParseInt(f[0], 10, 64)
		noise, e2 := strconv.ParseInt(f[1], 10, 64)
		load, e3 := strconv.ParseFloat(f[2], 64)
		rate, e4 := strconv.ParseFloat(f[3], 64)
		n, e5 := strconv.Atoi(f[4])
		if e1 != nil || e2 != nil || e3 != nil || e4 != nil || e5 != nil {
			return
		}
		out[id] = control.Baseline{TTFT: time.Duration(ttft), Noise: time.Duration(noise), Load: load, TokenRate: rate, Samples: n}
	})
	return out
}

// seedLocked records the fleet's baseline of p (the median of the live
// replicas' other than this one) and seeds p's controller with it when it
// is cold.
func (c *Coordinator) seedLocked(p *provider, published map[string]control.Baseline) {
	bs := make([]control.Baseline, 0, len(published))
	for id, b := range published {
		if _, live := c.peers[id]; live && id != c.o.ReplicaID {
			bs = append(bs, b)
		}
	}
	p.baselines = len(bs)
	if len(bs) == 0 {
		p.fleetBaseline = 0
		return
	}
	m := control.MedianBaseline(bs)
	p.fleetBaseline = m.TTFT
	if _, warm := p.lim.Baseline(); warm {
		return
	}
	if p.lim.SeedBaseline(m) {
		p.seeded++
		c.log.Info("cluster: cold controller seeded with the fleet's TTFT baseline", "provider", p.name,
			"baseline", m.TTFT.String(), "replicas", len(bs))
	}
}
