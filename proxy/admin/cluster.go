package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/adaptive/cluster"
)

var (
	descClusterDegraded = newDesc("sluice_cluster_degraded",
		"1 while Redis cannot be reached and each provider is capped at ceiling / replicas last seen; 0 while coordinated.")
	descClusterReplicas = newDesc("sluice_cluster_replicas",
		"Live replicas of the fleet at the last good heartbeat, this one included.")
	descClusterHeartbeats = newDesc("sluice_cluster_heartbeats_total",
		"Heartbeats sent to Redis, by result (ok, error).", "result")
	descClusterStateLost = newDesc("sluice_cluster_state_lost_total",
		"Heartbeats that found Redis without the fleet's state (first start, or a restart) and rebuilt it.")
	descClusterCap = newDesc("sluice_cluster_cap",
		"This replica's cap on the provider's limit: its share of the fleet's ceiling (ceiling / replicas when degraded).", "provider")
	descClusterShare = newDesc("sluice_cluster_share",
		"This replica's share of the fleet's ceiling, from the live replicas' demand.", "provider")
	descClusterCeiling = newDesc("sluice_cluster_ceiling",
		"The fleet's ceiling: the lowest ceiling of the live replicas.", "provider")
	descClusterInflight = newDesc("sluice_cluster_fleet_inflight_requests",
		"Requests in flight to the provider summed over the live replicas, at the last heartbeat.", "provider")
	descClusterDemand = newDesc("sluice_cluster_fleet_demand_requests",
		"Requests in flight or queued for the provider, summed over the live replicas at the last heartbeat.", "provider")
	descClusterSignals = newDesc("sluice_cluster_freeze_signals_total",
		"Fleet-wide growth freezes (a Retry-After or a loss cut), by direction: sent by this replica, received from others.", "provider", "direction")
	descClusterLeases = newDesc("sluice_cluster_leases_held",
		"Strict mode: leases this replica holds now.", "provider")
	descClusterLeasesStore = newDesc("sluice_cluster_leases_in_store",
		"Strict mode: leases of the whole fleet in Redis at the last heartbeat.", "provider")
	descClusterLeaseReqs = newDesc("sluice_cluster_lease_requests_total",
		"Strict mode: lease requests by result: granted (in Redis), unconfirmed (granted without Redis while degraded), timeout (none within queue.max_wait), canceled.", "provider", "result")
	descClusterLeaseWaited = newDesc("sluice_cluster_lease_waits_total",
		"Strict mode: lease requests that found the fleet full and waited.", "provider")
	descClusterLeaseDropped = newDesc("sluice_cluster_lease_release_dropped_total",
		"Strict mode: leases that could not be released and expire by their TTL instead.", "provider")
	descClusterRateLeased = newDesc("sluice_cluster_rate_leased",
		"1 while the provider's own rate limits are leased from the fleet's buckets in Redis; 0 while local at limit / replicas (Redis unreachable).", "provider")
	descClusterRatePool = newDesc("sluice_cluster_rate_pool_tokens",
		"Tokens (or requests) of the fleet's rate bucket leased by this replica and not used yet; negative: owed.", "provider", "dimension")
	descClusterRateFleet = newDesc("sluice_cluster_rate_fleet_level_tokens",
		"The fleet's rate bucket at this replica's last sync; negative: debt.", "provider", "dimension")
	descClusterRateSyncs = newDesc("sluice_cluster_rate_syncs_total",
		"Syncs of this replica's rate pools with the fleet's buckets, by result (ok, error).", "result")
	descClusterBaseline = newDesc("sluice_cluster_fleet_baseline_seconds",
		"Median learned TTFT baseline of the other live replicas (0: none published).", "provider")
	descClusterSeeded = newDesc("sluice_cluster_baseline_seeded_total",
		"Times this replica's cold controller was seeded with the fleet's TTFT baseline.", "provider")
	descClusterLeaseSeconds = newDesc("sluice_cluster_lease_acquire_seconds_total",
		"Strict mode: time granted lease requests spent acquiring (the round trip, and any wait for a free lease).", "provider")
)

// clusterCollector reads the fleet coordinator at scrape time.
type clusterCollector struct{ status func() cluster.Status }

// RegisterCluster registers the fleet metrics (sluice_cluster_*) of co on
// reg, read from co.Status at scrape time.
func RegisterCluster(reg prometheus.Registerer, co interface{ Status() cluster.Status }) error {
	return reg.Register(clusterCollector{co.Status})
}

func (clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClusterDegraded, descClusterReplicas, descClusterHeartbeats, descClusterStateLost,
		descClusterCap, descClusterShare, descClusterCeiling, descClusterInflight, descClusterDemand, descClusterSignals,
		descClusterLeases, descClusterLeasesStore, descClusterLeaseReqs, descClusterLeaseWaited, descClusterLeaseDropped, descClusterLeaseSeconds,
		descClusterRateLeased, descClusterRatePool, descClusterRateFleet, descClusterRateSyncs, descClusterBaseline, descClusterSeeded} {
		ch <- d
	}
}

func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	degraded := 0.0
	if st.State == cluster.StateDegraded {
		degraded = 1
	}
	gauge(descClusterDegraded, degraded)
	gauge(descClusterReplicas, float64(st.Replicas))
	counter(descClusterHeartbeats, float64(st.Heartbeats), "ok")
	counter(descClusterHeartbeats, float64(st.HeartbeatFailures), "error")
	counter(descClusterStateLost, float64(st.StateLost))
	counter(descClusterRateSyncs, float64(st.RateSyncs), "ok")
	counter(descClusterRateSyncs, float64(st.RateSyncFailures), "error")
	for _, p := range st.Providers {
		gauge(descClusterBaseline, p.FleetBaselineSeconds, p.Name)
		counter(descClusterSeeded, float64(p.BaselineSeeded), p.Name)
		if r := p.Rate; r != nil {
			leased := 0.0
			if r.Mode == "leased" {
				leased = 1
			}
			gauge(descClusterRateLeased, leased, p.Name)
			for _, d := range r.Dims {
				gauge(descClusterRatePool, float64(d.Held), p.Name, d.Dim)
				gauge(descClusterRateFleet, float64(d.FleetLevel), p.Name, d.Dim)
			}
		}
		gauge(descClusterCap, float64(p.Cap), p.Name)
		gauge(descClusterShare, float64(p.Share), p.Name)
		gauge(descClusterCeiling, float64(p.Ceiling), p.Name)
		gauge(descClusterInflight, float64(p.FleetInflight), p.Name)
		gauge(descClusterDemand, float64(p.FleetDemand), p.Name)
		counter(descClusterSignals, float64(p.SignalsSent), p.Name, "sent")
		counter(descClusterSignals, float64(p.SignalsReceived), p.Name, "received")
		l := p.Leases
		if l == nil {
			continue
		}
		gauge(descClusterLeases, float64(l.Held), p.Name)
		gauge(descClusterLeasesStore, float64(l.InStore), p.Name)
		counter(descClusterLeaseReqs, float64(l.Granted-l.Unconfirmed), p.Name, "granted")
		counter(descClusterLeaseReqs, float64(l.Unconfirmed), p.Name, "unconfirmed")
		counter(descClusterLeaseReqs, float64(l.Timeouts), p.Name, "timeout")
		counter(descClusterLeaseReqs, float64(l.Canceled), p.Name, "canceled")
		counter(descClusterLeaseWaited, float64(l.Waited), p.Name)
		counter(descClusterLeaseDropped, float64(l.ReleaseDropped), p.Name)
		counter(descClusterLeaseSeconds, l.AcquireSecondsTotal, p.Name)
	}
}
