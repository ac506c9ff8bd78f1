package fair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/bench/load"
)

// Options control a run.
type Options struct {
	// Short runs each scenario for a few seconds: it checks the machinery;
	// its numbers mean nothing.
	Short bool
	// Seed seeds the providers and the load; 0 means 1.
	Seed uint64
	// Logf, when set, receives progress messages.
	Logf func(format string, args ...any)
}

func (o *Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// seconds returns d, or short when the run is short.
func (o *Options) seconds(d, short time.Duration) time.Duration {
	if o.Short {
		return short
	}
	return d
}

// Scenario is one fair-queue benchmark.
type Scenario struct {
	Name, Title string
	// About says what the scenario models and what to look for (Markdown).
	About string
	Run   func(ctx context.Context, opt Options) (*Report, error)
}

// All returns every scenario, in report order.
func All() []*Scenario {
	return []*Scenario{BatchFlood(), TwoTenants(), EarlyRejection()}
}

// ByName returns the named scenario.
func ByName(name string) (*Scenario, bool) {
	for _, sc := range All() {
		if sc.Name == name {
			return sc, true
		}
	}
	return nil, false
}

// Report is the outcome of one scenario: Markdown tables and the checks of
// what it must show.
type Report struct {
	Scenario *Scenario
	Short    bool
	Tables   []string
	Checks   []Check
}

// Check is one target and whether it was met.
type Check struct {
	Target, Got string
	Met         bool
}

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n%s\n\n", r.Scenario.Title, r.Scenario.About)
	if r.Short {
		b.WriteString("*Short run: the numbers below mean nothing.*\n\n")
	}
	for _, t := range r.Tables {
		b.WriteString(t + "\n")
	}
	if len(r.Checks) > 0 {
		b.WriteString("| target | measured | met |\n|---|---|---|\n")
		for _, c := range r.Checks {
			met := "**met**"
			if !c.Met {
				met = "**not met**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", c.Target, c.Got, met)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Met reports whether every check was met.
func (r *Report) Met() bool {
	for _, c := range r.Checks {
		if !c.Met {
			return false
		}
	}
	return true
}

// flow is one load generator of a run.
type flow struct {
	name string
	cfg  load.Config
}

// runFlows runs every flow at once and returns their results by name.
func runFlows(ctx context.Context, flows []flow) (map[string]*load.Result, error) {
	res := make([]*load.Result, len(flows))
	errs := make([]error, len(flows))
	var wg sync.WaitGroup
	for i, f := range flows {
		wg.Go(func() { res[i], errs[i] = load.Run(ctx, f.cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make(map[string]*load.Result, len(flows))
	for i, f := range flows {
		out[f.name] = res[i]
	}
	return out, ctx.Err()
}

// quantile returns the q-quantile (0..1) of ds, which it sorts; 0 when
// empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q * float64(len(ds)))
	return ds[min(i, len(ds)-1)]
}

// window is what a flow did in [from, to) of its run: arrivals and
// refusals by their start, completions (OK) and their tokens (prompt +
// output) by their end, rates per second of the window. Counting
// completions by their end keeps requests that waited long in the count
// without counting ones that started before the window.
type window struct {
	offered, completed float64
	refused            int
	tokens             int
}

func windowOf(recs []load.Record, from, to time.Duration) window {
	var w window
	var arrived, done int
	for _, r := range recs {
		if r.Start >= from && r.Start < to {
			arrived++
			if r.Outcome == load.RejectedSluice {
				w.refused++
			}
		}
		if r.Outcome == load.OK && r.End() >= from && r.End() < to {
			done++
			w.tokens += r.PromptTokens + r.Tokens
		}
	}
	sec := (to - from).Seconds()
	w.offered, w.completed = float64(arrived)/sec, float64(done)/sec
	return w
}

// after returns the records that started at or after skip into the run.
func after(recs []load.Record, skip time.Duration) []load.Record {
	var out []load.Record
	for _, r := range recs {
		if r.Start >= skip && r.Outcome != load.Cut {
			out = append(out, r)
		}
	}
	return out
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}
