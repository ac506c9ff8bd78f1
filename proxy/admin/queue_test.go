package admin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// TestStatusShowsClassesAndTenants: /admin/status lists the queue's
// classes with what each admitted, and the top tenants by tokens used,
// named by the hash of their API key; /metrics has the per-class state.
// The key itself appears nowhere.
func TestStatusShowsClassesAndTenants(t *testing.T) {
	const key = "sk-secret-tenant-key-123"
	_, base, admin, _ := sluice(t, upstream(t), func(p *config.Provider) {
		p.Limit.Algorithm, p.Limit.Ceiling, p.Limit.Initial = settings.AlgorithmFixed, 4, 4
	})
	for range 3 {
		drain(post(t, base+"/fake/v1/chat/completions", "Authorization", "Bearer "+key, "X-Sluice-Class", "batch"))
	}
	// Asking for more than the default class gets the default class.
	drain(post(t, base+"/fake/v1/chat/completions", "X-Sluice-Class", "interactive"))

	var rep StatusReport
	getJSON(t, admin+"/admin/status", &rep)
	v := rep.Providers[0]
	byName := map[string]ClassView{}
	for _, c := range v.Classes {
		byName[c.Name] = c
	}
	if len(v.Classes) != 3 || byName["batch"].Admitted != 3 || byName["interactive"].Admitted != 0 || byName["standard"].Admitted != 1 {
		t.Fatalf("classes %+v", v.Classes)
	}
	if c := byName["batch"]; c.Share != 0.8 || c.Cap != 3 {
		t.Errorf("batch share %v cap %d, want 0.8 and 3 of 4 (default classes, no saturation)", c.Share, c.Cap)
	}
	sum := sha256.Sum256([]byte(key))
	want := hex.EncodeToString(sum[:8])
	if len(v.Tenants) != 2 || v.Tenants[0].Tenant != want || v.Tenants[1].Tenant != "anonymous" || v.TenantsTracked != 2 {
		t.Fatalf("top tenants %+v (tracked %d), want %s first, then anonymous", v.Tenants, v.TenantsTracked, want)
	}
	if v.Tenants[0].Tokens == 0 || v.Tenants[0].Tokens <= v.Tenants[1].Tokens {
		t.Errorf("tenant tokens %d and %d: want the three batch requests' usage above the one", v.Tenants[0].Tokens, v.Tenants[1].Tokens)
	}
	raw, mfs := scrape(t, admin)
	if got := sample(t, mfs, "sluice_class_admitted_requests_total", "provider", "fake", "class", "batch"); got != 3 {
		t.Errorf("sluice_class_admitted_requests_total{class=batch} = %v, want 3", got)
	}
	if got := sample(t, mfs, "sluice_class_limit", "provider", "fake", "class", "batch"); got != 3 {
		t.Errorf("sluice_class_limit{class=batch} = %v, want 3", got)
	}
	status := getRaw(t, admin+"/admin/status")
	for what, text := range map[string]string{"/metrics": string(raw), "/admin/status": status} {
		if strings.Contains(text, key) || strings.Contains(text, "secret-tenant") {
			t.Errorf("%s shows the tenant's API key", what)
		}
	}
}

func getRaw(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	return drain(resp)
}

// A class whose requests waited far longer than estimated has its ratio
// quantiles past the histogram's last bound: the status page must still
// encode (JSON has no infinity) and say "+Inf", and read back the same.
func TestEstimateViewPastLastBound(t *testing.T) {
	t.Parallel()
	buckets := make([]uint64, len(adaptive.CalibrationBuckets)+1)
	buckets[0] = 1
	buckets[len(buckets)-1] = 9 // nine ratios above every bound
	v := estimateView(adaptive.CalibrationStats{Buckets: buckets, Count: 10})
	if !math.IsInf(float64(v.RatioP90), 1) || !math.IsInf(float64(v.RatioP50), 1) {
		t.Fatalf("p50 %v p90 %v, want +Inf for both", v.RatioP50, v.RatioP90)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encoding the estimate view: %v", err)
	}
	if !strings.Contains(string(out), `"ratio_p90":"+Inf"`) {
		t.Fatalf("encoded %s, want ratio_p90 \"+Inf\"", out)
	}
	var back EstimateView
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	if back != v {
		t.Fatalf("read back %+v, want %+v", back, v)
	}
	v = estimateView(adaptive.CalibrationStats{Buckets: buckets[: len(buckets)-1 : len(buckets)-1], Count: 1})
	if out, _ := json.Marshal(v); !strings.Contains(string(out), `"ratio_p50":0.125`) {
		t.Fatalf("encoded %s, want ratio_p50 0.125", out)
	}
}
