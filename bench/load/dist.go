package load

import (
	"math"
	"math/rand/v2"
)

// Dist is a distribution of token counts: lognormal with the given mean and
// sigma, rounded and clamped to [Min, Max]. Sigma 0 makes every draw Mean.
// The zero Dist draws 0 (for Output: let the server decide).
type Dist struct {
	Mean  float64
	Sigma float64
	Min   int // 0 means 1 (when Mean > 0)
	Max   int // 0 means no upper bound
}

// Draw returns one value. It always consumes exactly one normal draw from
// r (even when Sigma is 0), so a sequence of draws does not depend on the
// settings of another Dist drawn from the same generator.
func (d Dist) Draw(r *rand.Rand) int {
	z := r.NormFloat64()
	if d.Mean <= 0 {
		return 0
	}
	v := d.Mean
	if d.Sigma > 0 {
		// mean of exp(mu + sigma*z) is exp(mu + sigma^2/2)
		mu := math.Log(d.Mean) - d.Sigma*d.Sigma/2
		v = math.Exp(mu + d.Sigma*z)
	}
	n := int(math.Round(v))
	lo := max(d.Min, 1)
	if n < lo {
		n = lo
	}
	if d.Max > 0 && n > d.Max {
		n = d.Max
	}
	return n
}

// expDuration draws an exponential duration with the given mean (0 stays 0).
func expDuration(r *rand.Rand, mean float64) float64 {
	e := r.ExpFloat64()
	if mean <= 0 {
		return 0
	}
	return e * mean
}
