package control

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/vtime"
	"github.com/sluicehq/sluice/settings"
)

func ctrlBenchSettings(algo string, rate float64) settings.Limit {
	s := settings.DefaultLimit()
	s.Algorithm = algo
	s.MinTokenRate = rate
	return s
}

// BenchmarkControllerObserve measures one FirstToken sample, the call the
// proxy makes once per request. The clock advances 1 ms per reading, so a
// gradient2 window (2 s, 5 samples) closes about every 2000 samples and its
// cost is amortised as in production at ~1000 req/s.
func BenchmarkControllerObserve(b *testing.B) {
	for _, bc := range []struct {
		name string
		s    settings.Limit
	}{
		{"fixed", ctrlBenchSettings(settings.AlgorithmFixed, 0)},
		{"aimd", ctrlBenchSettings(settings.AlgorithmAIMD, 0)},
		{"gradient2", ctrlBenchSettings(settings.AlgorithmGradient2, 0)},
		{"gradient2+rate", ctrlBenchSettings(settings.AlgorithmGradient2, 20)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			clk := vtime.NewClock()
			clk.Tick = time.Millisecond
			c, err := New(bc.s, clk)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now := clk.Now()
				c.Observe(Sample{Kind: FirstToken, Dispatched: now, InflightAtDispatch: c.Limit(),
					TTFT: time.Duration(300+i%200) * time.Millisecond, PromptTokens: 1000})
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			clk := vtime.NewClock()
			clk.Tick = time.Millisecond
			c, err := New(bc.s, clk)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					i++
					now := clk.Now()
					c.Observe(Sample{Kind: FirstToken, Dispatched: now, InflightAtDispatch: c.Limit(),
						TTFT: time.Duration(300+i%200) * time.Millisecond, PromptTokens: 1000})
				}
			})
		})
	}
}

// BenchmarkControllerTokenRate measures one TokenRate sample, raised every
// 32 output tokens of a stream: gradient2 keeps it for the window's
// per-stream rate (the growth guard) and the loss part's probe.
func BenchmarkControllerTokenRate(b *testing.B) {
	for _, name := range []string{settings.AlgorithmAIMD, settings.AlgorithmGradient2} {
		b.Run(name, func(b *testing.B) {
			clk := vtime.NewClock()
			clk.Tick = time.Millisecond
			c, err := New(ctrlBenchSettings(name, 20), clk)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				now := clk.Now()
				c.Observe(Sample{Kind: TokenRate, Dispatched: now, InflightAtDispatch: c.Limit(), Rate: float64(20 + i%20)})
			}
		})
	}
}

// BenchmarkControllerWindowClose measures a FirstToken sample that closes a
// delay window (sort of the window's samples, the library's Gradient2
// update, recompute): each op adds WindowSamples samples, the last one past
// the window length.
func BenchmarkControllerWindowClose(b *testing.B) {
	for _, mode := range []struct {
		name   string
		target time.Duration
	}{{"learned", 0}, {"setpoint", 500 * time.Millisecond}} {
		b.Run(mode.name, func(b *testing.B) {
			clk := vtime.NewClock()
			s := ctrlBenchSettings(settings.AlgorithmGradient2, 0)
			s.TTFTTarget = mode.target
			c := newCtrlForTest(b, s, clk)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				for j := 0; j < s.WindowSamples; j++ {
					clk.Advance(s.Window / time.Duration(s.WindowSamples))
					now := clk.Now()
					c.Observe(Sample{Kind: FirstToken, Dispatched: now, InflightAtDispatch: c.Limit(),
						TTFT: time.Duration(300+(i*7+j*13)%400) * time.Millisecond, PromptTokens: 1000})
				}
			}
			if c.delay.windows == 0 {
				b.Fatal("no window closed")
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(c.delay.windows), "ns/window")
		})
	}
}
