package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/proxy"
)

// Limit components and binding values, as label values.
const (
	partDelay   = "delay"
	partLoss    = "loss"
	partRate    = "rate"
	partMin     = "min"
	partCeiling = "ceiling"
)

var bindingParts = []string{partDelay, partLoss, partRate, partMin, adaptive.BindingCeiling, adaptive.BindingFixed, adaptive.BindingFleet}

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descLimit = newDesc("sluice_concurrency_limit",
		"Effective concurrency limit: permits the provider may have in use, min(controller limit, ceiling).", "provider")
	descComponent = newDesc("sluice_concurrency_limit_component",
		"Each part of the limit (component: delay, loss, rate, min, ceiling); the effective limit is clamp(min(delay, loss, rate), min, ceiling). Parts the algorithm does not use are absent.", "provider", "component")
	descBinding = newDesc("sluice_concurrency_limit_binding",
		"1 for the part that sets the effective limit now (component: delay, loss, rate, min, ceiling, fixed), 0 for the others.", "provider", "component")
	descInflight = newDesc("sluice_inflight_requests",
		"Permits in use: requests sent upstream whose response has not ended.", "provider")
	descQueued = newDesc("sluice_queued_requests",
		"Requests waiting for a permit (queue depth).", "provider")
	descQueueMax = newDesc("sluice_queue_max_waiting",
		"Configured bound of the wait queue (queue.max_waiting).", "provider")
	descAdmitted = newDesc("sluice_admitted_requests_total",
		"Permits granted (fast path and after waiting).", "provider")
	descTTFTMedian = newDesc("sluice_controller_ttft_median_seconds",
		"Median prompt-normalised TTFT of the delay controller's last closed window (0 before the first window).", "provider")
	descTTFTBaseline = newDesc("sluice_controller_ttft_baseline_seconds",
		"The delay controller's learned no-load TTFT, or the configured ttft_target.", "provider")
	descTokenRate = newDesc("sluice_controller_output_tokens_per_second",
		"Last output token rate sample seen by the controller (tokens per second, mid-stream, over at least 32 tokens).", "provider")
	descPace = newDesc("sluice_controller_pace_requests_per_second",
		"Dispatch pace learned from refusals that a request rate, not the concurrency, explains (requests per second); 0 while dispatches are not paced.", "provider")
	descFrozen = newDesc("sluice_controller_frozen_until_timestamp_seconds",
		"Unix time until which limit growth is frozen by an upstream Retry-After; 0 when not frozen.", "provider")
	descLastDrop = newDesc("sluice_controller_last_drop_timestamp_seconds",
		"Unix time of the last drop (congestion signal) the controller saw; 0 if none.", "provider")
	descWindows = newDesc("sluice_controller_windows_total",
		"Delay windows closed and fed to the delay controller.", "provider")
	descStale = newDesc("sluice_controller_stale_samples_total",
		"TTFT samples skipped because their request was dispatched before the last limit decrease.", "provider")
	descBad = newDesc("sluice_controller_bad_samples_total",
		"Samples rejected as invalid (TTFT <= 0 or over an hour, non-finite token rate).", "provider")
	descResets = newDesc("sluice_controller_delay_resets_total",
		"Times the delay part's estimate came back non-finite or out of range and was restarted.", "provider")
	descDrops = newDesc("sluice_drops_total",
		"Congestion signals fed to the provider's controller, by kind (rate_limit, overloaded, unavailable, first_token_timeout); at most one per request.", "provider", "kind")
	descBuffered = newDesc("sluice_buffered_body_bytes",
		"Bytes of request bodies and non-streaming answers buffered now, out of server.max_buffered_bytes.")
	descClassInflight = newDesc("sluice_class_inflight_requests",
		"Permits in use by requests of each priority class.", "provider", "class")
	descClassQueued = newDesc("sluice_class_queued_requests",
		"Requests of each priority class waiting for a permit.", "provider", "class")
	descClassLimit = newDesc("sluice_class_limit",
		"Permits each priority class may hold now: its share of the effective limit (at least 1).", "provider", "class")
	descClassShare = newDesc("sluice_class_share",
		"Fraction of the effective limit each priority class may hold now: from queue.classes[].max_share down to saturated_share as the provider saturates.", "provider", "class")
	descClassAdmitted = newDesc("sluice_class_admitted_requests_total",
		"Permits granted to requests of each priority class (fast path and after waiting).", "provider", "class")
	descEstimateRatio = newDesc("sluice_queue_wait_estimate_ratio",
		"Actual over estimated wait of each request that got its permit after waiting with an estimate (its Retry-After, had it been refused), per class: calibration of the wait estimate.", "provider", "class")
	descEstimateCalibrated = newDesc("sluice_queue_wait_estimate_calibrated",
		"1 while the class's wait estimate has proven itself on recent long waits and requests may be refused on it (queue_deadline), else 0.", "provider", "class")
	descKept = newDesc("sluice_kept_permits",
		"Permits released by a tenant under its share while others wait, kept a moment for that tenant's next request.", "provider")
	descSaturation = newDesc("sluice_queue_saturation",
		"How close the provider is to saturation, 0 to 1, as the class shares see it (TTFT median against baseline, time since the last drop).", "provider")
	descTenants = newDesc("sluice_tenants_tracked",
		"Tenants the provider's queue tracks (bounded by queue.max_tenants).", "provider")
	descInfo = newDesc("sluice_provider_info",
		"Configured providers (value 1), with their algorithm and dialect.", "provider", "algorithm", "dialect")
)

// NewRegistry returns a registry (never the global default one) with the
// Go runtime and process collectors, for the admin listener's /metrics.
// Register Sluice's own collectors on it with Register and
// proxy.NewMetrics.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Register adds to reg the metrics read from srv's limiters at scrape
// time (limits and their parts, in flight, queue depth, drops, controller
// state) and the config reload metrics, which the returned Reloads
// records.
func Register(reg prometheus.Registerer, srv *proxy.Server) (*Reloads, error) {
	r := newReloads()
	for _, c := range []prometheus.Collector{&stateCollector{srv: srv}, r.ok, r.ts, r.n} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// stateCollector exports limiter and controller state at scrape time. It
// reads the server's config in force, so providers appear and disappear
// with reloads; the request path pays nothing for it.
type stateCollector struct {
	srv *proxy.Server
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLimit, descComponent, descBinding, descInflight, descQueued, descQueueMax,
		descAdmitted, descTTFTMedian, descTTFTBaseline, descTokenRate, descPace, descFrozen, descLastDrop, descWindows,
		descStale, descBad, descResets, descDrops, descInfo, descBuffered, descClassInflight, descClassQueued, descClassLimit,
		descClassShare, descClassAdmitted, descSaturation, descTenants, descEstimateRatio, descEstimateCalibrated, descKept} {
		ch <- d
	}
	for _, d := range admissionDescs {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(descBuffered, float64(c.srv.BufferedBytes()))
	for _, p := range c.srv.Providers() {
		v := viewOf(p)
		n := p.Name
		gauge(descInfo, 1, n, v.Algorithm, p.Dialect)
		gauge(descLimit, float64(v.Limit), n)
		if v.Components.Delay != nil {
			gauge(descComponent, *v.Components.Delay, n, partDelay)
		}
		if v.Components.Loss != nil {
			gauge(descComponent, *v.Components.Loss, n, partLoss)
		}
		if v.Components.Rate != nil {
			gauge(descComponent, *v.Components.Rate, n, partRate)
		}
		gauge(descComponent, float64(v.Components.Min), n, partMin)
		gauge(descComponent, float64(v.Components.Ceiling), n, partCeiling)
		for _, part := range bindingParts {
			b := 0.0
			if part == v.Binding {
				b = 1
			}
			gauge(descBinding, b, n, part)
		}
		gauge(descInflight, float64(v.Inflight), n)
		gauge(descQueued, float64(v.Queued), n)
		gauge(descQueueMax, float64(v.MaxWaiting), n)
		counter(descAdmitted, float64(v.Admitted), n)
		gauge(descTTFTMedian, v.TTFTMedianSeconds, n)
		gauge(descTTFTBaseline, v.TTFTBaselineSeconds, n)
		gauge(descTokenRate, v.TokenRate, n)
		gauge(descPace, v.PaceRPS, n)
		gauge(descFrozen, unixSeconds(v.FrozenUntil), n)
		gauge(descLastDrop, unixSeconds(v.LastDrop), n)
		counter(descWindows, float64(v.state.WindowsApplied), n)
		counter(descStale, float64(v.state.StaleSamples), n)
		counter(descBad, float64(v.state.BadSamples), n)
		counter(descResets, float64(v.state.DelayResets), n)
		for k := control.DropRateLimit; k < control.NumDropKinds; k++ {
			counter(descDrops, float64(v.drops[k]), n, k.String())
		}
		gauge(descSaturation, v.Saturation, n)
		gauge(descTenants, float64(v.TenantsTracked), n)
		for _, c := range v.Classes {
			gauge(descClassInflight, float64(c.Inflight), n, c.Name)
			gauge(descClassQueued, float64(c.Queued), n, c.Name)
			gauge(descClassLimit, float64(c.Cap), n, c.Name)
			gauge(descClassShare, c.Share, n, c.Name)
			counter(descClassAdmitted, float64(c.Admitted), n, c.Name)
		}
		for _, c := range p.Limiter.Classes {
			ch <- estimateHistogram(c.Calibration, n, c.Name)
			cal := 0.0
			if c.Calibration.Calibrated {
				cal = 1
			}
			gauge(descEstimateCalibrated, cal, n, c.Name)
		}
		gauge(descKept, float64(p.Limiter.Kept), n)
		collectAdmission(ch, p)
	}
}

func unixSeconds(t *time.Time) float64 {
	if t == nil || t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// estimateHistogram is a class's histogram of actual over estimated wait.
func estimateHistogram(c adaptive.CalibrationStats, provider, class string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(adaptive.CalibrationBuckets))
	var cum uint64
	for i, le := range adaptive.CalibrationBuckets {
		cum += c.Buckets[i]
		buckets[le] = cum
	}
	return prometheus.MustNewConstHistogram(descEstimateRatio, c.Count, c.Sum, buckets, provider, class)
}
