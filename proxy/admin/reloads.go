package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reloads records the outcome of configuration loads and reloads.
type Reloads struct {
	ok, ts prometheus.Gauge
	n      *prometheus.CounterVec
}

func newReloads() *Reloads {
	r := &Reloads{
		ok: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_reload_success",
			Help: "Whether the last configuration load or reload succeeded (1) or was rejected (0).",
		}),
		ts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful configuration load or reload.",
		}),
		n: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Configuration loads and reloads, by result (success, failure).",
		}, []string{"result"}),
	}
	r.n.WithLabelValues("success")
	r.n.WithLabelValues("failure")
	return r
}

// Record records a load or reload at time at: sluice_config_reload_success,
// and on success sluice_config_last_reload_success_timestamp_seconds.
func (r *Reloads) Record(ok bool, at time.Time) {
	if ok {
		r.ok.Set(1)
		r.ts.Set(float64(at.UnixNano()) / 1e9)
		r.n.WithLabelValues("success").Inc()
		return
	}
	r.ok.Set(0)
	r.n.WithLabelValues("failure").Inc()
}
