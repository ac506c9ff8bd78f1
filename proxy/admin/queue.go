package admin

import (
	"math"
	"strconv"

	"github.com/sluicehq/sluice/adaptive"
)

// ClassView is one priority class of a provider's queue, as /admin/status
// shows it.
type ClassView struct {
	Name string `json:"name"`
	// Share is the fraction of the limit the class may hold now (it
	// shrinks from max_share to saturated_share as the provider
	// saturates), and Cap that share in permits.
	Share            float64 `json:"share"`
	Cap              int     `json:"cap"`
	Inflight         int     `json:"inflight"`
	Queued           int     `json:"queued"`
	Admitted         uint64  `json:"admitted"`
	Rejected         uint64  `json:"rejected"`
	QueueWaitSeconds float64 `json:"queue_wait_seconds_total"`
	// Estimate is how far the waits estimated for the class's queued
	// requests were from the waits they had.
	Estimate EstimateView `json:"wait_estimate"`
}

// EstimateView is the calibration of a class's wait estimate: Waited
// requests that got their permit after a wait with an estimate; Ratio the
// p50 and p90 of actual over estimated wait among them (from the
// histogram's buckets: the bucket's upper bound); Window the recent long
// waits the decision to refuse early looks at, with their median and low
// (5th percentile) ratio of actual over the model's estimate; Calibrated
// whether requests are refused on their estimate now. A quantile past the
// histogram's last bound is the string "+Inf", as in Prometheus' le label.
type EstimateView struct {
	Waited     uint64      `json:"waited"`
	RatioP50   BucketBound `json:"ratio_p50"`
	RatioP90   BucketBound `json:"ratio_p90"`
	Window     int         `json:"window"`
	WindowP50  float64     `json:"window_p50"`
	WindowLow  float64     `json:"window_low"`
	Calibrated bool        `json:"calibrated"`
}

func estimateView(c adaptive.CalibrationStats) EstimateView {
	return EstimateView{
		Waited: c.Count, RatioP50: bucketQuantile(c, 0.5), RatioP90: bucketQuantile(c, 0.9),
		Window: c.Window, WindowP50: c.P50, WindowLow: c.Low, Calibrated: c.Calibrated,
	}
}

// BucketBound is a histogram bucket's upper bound. JSON has no infinity,
// so the bound of the bucket past the last one encodes as "+Inf".
type BucketBound float64

// MarshalJSON writes the bound as a number, or "+Inf".
func (b BucketBound) MarshalJSON() ([]byte, error) {
	if math.IsInf(float64(b), 1) {
		return []byte(`"+Inf"`), nil
	}
	return strconv.AppendFloat(nil, float64(b), 'g', -1, 64), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (b *BucketBound) UnmarshalJSON(p []byte) error {
	if string(p) == `"+Inf"` {
		*b = BucketBound(math.Inf(1))
		return nil
	}
	f, err := strconv.ParseFloat(string(p), 64)
	*b = BucketBound(f)
	return err
}

// bucketQuantile is the upper bound of the histogram bucket holding the
// q quantile (+Inf past the last bound); 0 when empty.
func bucketQuantile(c adaptive.CalibrationStats, q float64) BucketBound {
	if c.Count == 0 {
		return 0
	}
	rank := uint64(q * float64(c.Count))
	var seen uint64
	for i, n := range c.Buckets {
		seen += n
		if seen > rank {
			if i < len(adaptive.CalibrationBuckets) {
				return BucketBound(adaptive.CalibrationBuckets[i])
			}
			break
		}
	}
	return BucketBound(math.Inf(1))
}

// TenantView is one of the tenants with the most tokens used. Tenant is
// the tenant's id, the first 16 hex digits of the SHA-256 of its key (API
// key or tenant header value; never the key itself), or "anonymous"
// (requests without a key) or "other" (new tenants while max_tenants were
// tracked and none was idle).
type TenantView struct {
	Tenant   string `json:"tenant"`
	Tokens   uint64 `json:"tokens"`
	Inflight int    `json:"inflight"`
	Queued   int    `json:"queued"`
	Rejected uint64 `json:"rejected"`
}

// TenantLabel is how status pages name a tenant id (see TenantView).
func TenantLabel(id uint64) string {
	switch id {
	case adaptive.AnonymousTenant:
		return "anonymous"
	case adaptive.OtherTenant:
		return "other"
	}
	s := strconv.FormatUint(id, 16)
	for len(s) < 16 {
		s = "0" + s
	}
	return s
}

func classViews(cs []adaptive.ClassStats) []ClassView {
	out := make([]ClassView, 0, len(cs))
	for _, c := range cs {
		out = append(out, ClassView{
			Name:             c.Name,
			Share:            c.Share,
			Cap:              c.Cap,
			Inflight:         c.Inflight,
			Queued:           c.Waiting,
			Admitted:         c.Admitted,
			Rejected:         c.Rejected,
			QueueWaitSeconds: c.WaitedTotal.Seconds(),
			Estimate:         estimateView(c.Calibration),
		})
	}
	return out
}

func tenantViews(ts []adaptive.TenantStats) []TenantView {
	out := make([]TenantView, 0, len(ts))
	for _, t := range ts {
		out = append(out, TenantView{
			Tenant:   TenantLabel(t.Tenant),
			Tokens:   t.Tokens,
			Inflight: t.Inflight,
			Queued:   t.Waiting,
			Rejected: t.Rejected,
		})
	}
	return out
}
