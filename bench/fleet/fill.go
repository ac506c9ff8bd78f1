package fleet

import (
	"slices"
	"time"
)

// Fill is how well a run kept the provider at its ceiling: the provider's
// open requests sampled every 100 ms, after the load settled (Settle).
type Fill struct {
	// Samples counted, from Settle to the end of the load.
	Samples int
	Settle  time.Duration
	// Mean and P10 of the provider's in flight over those samples.
	Mean float64
	P10  int
	// Over is the share of the samples above the ceiling; Over110 the
	// share above 110% of it, counted from the first second of the load
	// (the clients' ramp) on, over OverSamples samples.
	Over, Over110 float64
	OverSamples   int
}

// FillOf measures r's fill. Settle is the clients' ramp (a second), ten
// heartbeats (shares follow demand within a few; a replica that had
// permits while the fleet was idle keeps one for ten heartbeats after its
// demand went away) and a second.
func FillOf(c Config, r *Result) Fill {
	f := Fill{Settle: time.Second + 10*c.Heartbeat + time.Second}
	var xs []int
	over, over110 := 0, 0
	for _, s := range r.Samples {
		if s.At >= time.Second {
			f.OverSamples++
			if s.Provider > c.Ceiling {
				over++
			}
			if 10*s.Provider > 11*c.Ceiling {
				over110++
			}
		}
		if s.At >= f.Settle {
			xs = append(xs, s.Provider)
		}
	}
	if f.OverSamples > 0 {
		f.Over = float64(over) / float64(f.OverSamples)
		f.Over110 = float64(over110) / float64(f.OverSamples)
	}
	f.Samples = len(xs)
	if len(xs) == 0 {
		return f
	}
	sum := 0
	for _, x := range xs {
		sum += x
	}
	f.Mean = float64(sum) / float64(len(xs))
	slices.Sort(xs)
	f.P10 = xs[len(xs)/10]
	return f
}
