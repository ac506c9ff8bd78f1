package load

import (
	"math"
	"strconv"
)

// Tenants: fairness tests need several API keys in one run, some busier
// than others. With [Config.Tenants] = N, every call carries one of N
// keys (TenantKey) as its credential: Sluice tells tenants apart by it.

// TenantKey is the API key of tenant k: "sk-tenant-k".
func TenantKey(k int) string { return "sk-tenant-" + strconv.Itoa(k) }

// tenants assigns clients and arrivals to tenants: tenant k's share is
// proportional to 1/(k+1)^skew (skew 0: equal shares).
type tenants struct {
	cum []float64 // cumulative shares; the last is 1
}

func newTenants(n int, skew float64) tenants {
	if n <= 0 {
		return tenants{}
	}
	cum := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += math.Pow(float64(k+1), -skew)
		cum[k] = sum
	}
	for k := range cum {
		cum[k] /= sum
	}
	cum[n-1] = 1
	return tenants{cum: cum}
}

// at returns the tenant at quantile u in [0, 1).
func (t tenants) at(u float64) int {
	for k, c := range t.cum {
		if u < c {
			return k
		}
	}
	return max(len(t.cum)-1, 0)
}

// client returns closed-loop client i's tenant (of n clients): the shares
// exactly, as far as whole clients allow.
func (t tenants) client(i, n int) int {
	if len(t.cum) == 0 {
		return 0
	}
	return t.at((float64(i) + 0.5) / float64(n))
}

// arrival returns open-loop arrival n's tenant: the golden-ratio sequence
// spreads the quantiles evenly over any stretch of arrivals, without a
// random draw (which would change the arrivals' sizes).
func (t tenants) arrival(n int) int {
	if len(t.cum) == 0 {
		return 0
	}
	const phi = 0.6180339887498949 // 1/golden ratio
	_, u := math.Modf(float64(n+1) * phi)
	return t.at(u)
}
