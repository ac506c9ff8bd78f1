package admin

import (
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
