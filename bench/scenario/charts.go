package scenario

import (
	"math"
	"time"

	"github.com/sluicehq/sluice/bench/chart"
)

// Charts of a Result, as standalone SVG documents. Time axes are in model
// seconds since the start of the load.

// LimitChart has one panel per variant: the provider's capacity, Sluice's
// limit and the requests inside the provider (running or queued).
func LimitChart(r *Result) string {
	var panels []chart.Chart
	top := 0.0
	for i, v := range r.Variants {
		var x, capy, lim, inf []float64
		for _, smp := range r.Samples {
			vs := smp.V[i]
			x = append(x, smp.T.Seconds())
			capy = append(capy, float64(vs.Capacity))
			lim = append(lim, float64(vs.Limit))
			inf = append(inf, float64(vs.Running+vs.Queued))
			top = math.Max(top, math.Max(float64(vs.Capacity), math.Max(float64(vs.Limit), float64(vs.Running+vs.Queued))))
		}
		panels = append(panels, chart.Chart{
			Title:  v.Variant.Label,
			XLabel: "time (s)",
			YLabel: "requests",
			Width:  470, Height: 250,
			Lines: []chart.Line{
				{Name: "capacity", X: x, Y: capy, Color: "#000", Dash: []float64{5, 3}, Step: true},
				{Name: "inside provider", X: x, Y: inf, Color: "#999", Width: 1},
				{Name: "Sluice limit", X: x, Y: lim, Color: v.Variant.Color, Width: 2, Step: true},
			},
		})
	}
	ymax := chart.NiceCeil(top * 1.05)
	for i := range panels {
		panels[i].YMin, panels[i].YMax = 0, ymax
	}
	return chart.Grid(r.Scenario.Title+": capacity, limit and requests inside the provider", 2, panels)
}

// TTFTChart plots the client-observed TTFT p99 per second (queue wait
// included) of every variant, on a log scale.
func TTFTChart(r *Result) string {
	c := chart.Chart{
		Title:  "Time to first token, p99 per second (client view, queue wait included)",
		XLabel: "time (s)", YLabel: "seconds", LogY: true, Width: 940, Height: 320,
	}
	for _, v := range r.Variants {
		var x, y []float64
		for _, b := range v.Buckets {
			x = append(x, b.Start.Seconds())
			if b.TTFTCount == 0 {
				y = append(y, math.NaN())
			} else {
				y = append(y, b.TTFTP99.Seconds())
			}
		}
		c.Lines = append(c.Lines, chart.Line{Name: v.Variant.Label, X: x, Y: y, Color: v.Variant.Color})
	}
	return c.SVG()
}

// GoodputChart plots output tokens per second of completed streams (10 s
// moving average) of every variant.
func GoodputChart(r *Result) string {
	c := chart.Chart{
		Title:  "Goodput: output tokens/s of completed streams (10 s moving average)",
		XLabel: "time (s)", YLabel: "tokens/s", Width: 940, Height: 300,
	}
	for _, v := range r.Variants {
		var x, y []float64
		for _, b := range v.Buckets {
			x = append(x, b.Start.Seconds())
			y = append(y, float64(b.Tokens))
		}
		c.Lines = append(c.Lines, chart.Line{Name: v.Variant.Label, X: x, Y: movingAverage(y, 10), Color: v.Variant.Color})
	}
	return c.SVG()
}

// RejectionsChart plots, per second, the provider's 429/529s (solid) and
// Sluice's own 429s (dashed) of every variant.
func RejectionsChart(r *Result) string {
	c := chart.Chart{
		Title:  "Rejections per second: provider 429/529 (solid), Sluice queue full or timed out (dashed)",
		XLabel: "time (s)", YLabel: "per second", Width: 940, Height: 300,
	}
	for i, v := range r.Variants {
		var x, up, sl []float64
		var prevUp, prevSl uint64
		var prevT time.Duration
		for _, smp := range r.Samples {
			vs := smp.V[i]
			dt := (smp.T - prevT).Seconds()
			if dt <= 0 {
				continue
			}
			x = append(x, smp.T.Seconds())
			up = append(up, float64(vs.UpstreamRejected-prevUp)/dt)
			sl = append(sl, float64(vs.SluiceRejected-prevSl)/dt)
			prevUp, prevSl, prevT = vs.UpstreamRejected, vs.SluiceRejected, smp.T
		}
		c.Lines = append(c.Lines,
			chart.Line{Name: v.Variant.Label, X: x, Y: up, Color: v.Variant.Color},
			chart.Line{X: x, Y: sl, Color: v.Variant.Color, Dash: []float64{4, 3}})
	}
	return c.SVG()
}

// movingAverage returns the centred moving average over w points.
func movingAverage(y []float64, w int) []float64 {
	out := make([]float64, len(y))
	for i := range y {
		lo, hi := max(0, i-w/2), min(len(y), i+w/2+1)
		sum := 0.0
		for _, v := range y[lo:hi] {
			sum += v
		}
		out[i] = sum / float64(hi-lo)
	}
	return out
}
