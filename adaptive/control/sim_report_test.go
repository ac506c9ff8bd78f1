package control

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// simResult holds what one run measured, per phase.
type simResult struct {
	name   string
	phases []simPhase
	trace  []simPoint // effective limit after every change
	drops  []simDropObs
	final  State
}

type simPhase struct {
	simPhaseSpec
	completed int
	tokens    int // output tokens of completed streams
	upstream  int // dispatched upstream
	drops     int // upstream refusals
	rejected  int // Sluice rejections (queue full or max_wait)
	ttfts     []time.Duration
	// clientTTFTs are the times to first token the clients saw: Sluice's
	// queue wait and pace included.
	clientTTFTs []time.Duration
	rates       []float64 // per-stream output tokens/s of completed streams
}

type simPoint struct {
	t time.Duration
	v int
}

type simDropObs struct {
	t          time.Duration
	retryAfter time.Duration
	limitAfter int
}

func newSimResult(cfg simConfig) *simResult {
	r := &simResult{name: cfg.name}
	specs := cfg.phases
	if len(specs) == 0 {
		specs = []simPhaseSpec{{name: "all", to: cfg.duration}}
	}
	for _, sp := range specs {
		r.phases = append(r.phases, simPhase{simPhaseSpec: sp})
	}
	return r
}

func (r *simResult) completed() int {
	n := 0
	for _, ph := range r.phases {
		n += ph.completed
	}
	return n
}

func (r *simResult) tokens() int {
	n := 0
	for _, ph := range r.phases {
		n += ph.tokens
	}
	return n
}

func (r *simResult) refusals() int {
	n := 0
	for _, ph := range r.phases {
		n += ph.drops
	}
	return n
}

func (r *simResult) rejected() int {
	n := 0
	for _, ph := range r.phases {
		n += ph.rejected
	}
	return n
}

func (r *simResult) ttfts() []time.Duration {
	var all []time.Duration
	for _, ph := range r.phases {
		all = append(all, ph.ttfts...)
	}
	return all
}

func (r *simResult) clientTTFTs() []time.Duration {
	var all []time.Duration
	for _, ph := range r.phases {
		all = append(all, ph.clientTTFTs...)
	}
	return all
}

func (r *simResult) rates() []float64 {
	var all []float64
	for _, ph := range r.phases {
		all = append(all, ph.rates...)
	}
	return all
}

// avgLimit is the time-weighted mean effective limit over [from, to).
func (r *simResult) avgLimit(from, to time.Duration) float64 {
	var sum float64
	for i, p := range r.trace {
		end := to
		if i+1 < len(r.trace) {
			end = min(end, r.trace[i+1].t)
		}
		start := max(p.t, from)
		if end > start {
			sum += float64(p.v) * (end - start).Seconds()
		}
	}
	return sum / (to - from).Seconds()
}

// limitAt returns the effective limit at t.
func (r *simResult) limitAt(t time.Duration) int {
	i, _ := slices.BinarySearchFunc(r.trace, t, func(p simPoint, t time.Duration) int {
		if p.t <= t {
			return -1
		}
		return 1
	})
	return r.trace[max(0, i-1)].v
}

// settle returns how long after from the limit entered [c(1-tol), c(1+tol)]
// for good (until to), or -1 if it never did.
func (r *simResult) settle(from, to time.Duration, c int, tol float64) time.Duration {
	lo, hi := (1-tol)*float64(c), (1+tol)*float64(c)
	in := func(v int) bool { return float64(v) >= lo && float64(v) <= hi }
	since := from
	if !in(r.limitAt(from)) {
		since = -1
	}
	for _, p := range r.trace {
		if p.t <= from || p.t >= to {
			continue
		}
		switch {
		case !in(p.v):
			since = -1
		case since < 0:
			since = p.t
		}
	}
	if since < 0 {
		return -1
	}
	return since - from
}

// reach returns how long after from the limit first came within tol of c,
// or -1 if it did not before to.
func (r *simResult) reach(from, to time.Duration, c int, tol float64) time.Duration {
	lo, hi := (1-tol)*float64(c), (1+tol)*float64(c)
	if v := float64(r.limitAt(from)); v >= lo && v <= hi {
		return 0
	}
	for _, p := range r.trace {
		if p.t > from && p.t < to && float64(p.v) >= lo && float64(p.v) <= hi {
			return p.t - from
		}
	}
	return -1
}

func simPercentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func simMedianFloat(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// simRow summarises the runs (one per seed) of one variant.
type simRow struct {
	name      string
	runs      []*simResult
	completed []int // per run
	tokens    float64
	refusals  float64 // per run
	rejected  float64
	ttftP50   time.Duration // over every request of every run
	ttftP99   time.Duration
	// clientP99 is the clients' TTFT p99 (Sluice's queue included).
	clientP99 time.Duration
	rateP50   float64
	limits    []float64 // per phase: mean limit over the phase's second half, mean over runs
}

func simRowOf(name string, runs []*simResult) simRow {
	row := simRow{name: name, runs: runs}
	var ttfts, client []time.Duration
	var rates []float64
	for _, r := range runs {
		client = append(client, r.clientTTFTs()...)
		row.completed = append(row.completed, r.completed())
		row.tokens += float64(r.tokens())
		row.refusals += float64(r.refusals())
		row.rejected += float64(r.rejected())
		ttfts = append(ttfts, r.ttfts()...)
		rates = append(rates, r.rates()...)
	}
	n := float64(len(runs))
	row.tokens /= n
	row.refusals /= n
	row.rejected /= n
	row.ttftP50, row.ttftP99 = simPercentile(ttfts, 0.5), simPercentile(ttfts, 0.99)
	row.clientP99 = simPercentile(client, 0.99)
	row.rateP50 = simMedianFloat(rates)
	for _, ph := range runs[0].phases {
		var lim float64
		for _, r := range runs {
			lim += r.avgLimit(ph.from+(ph.to-ph.from)/2, ph.to)
		}
		row.limits = append(row.limits, lim/n)
	}
	return row
}

func (row simRow) meanCompleted() float64 {
	s := 0
	for _, c := range row.completed {
		s += c
	}
	return float64(s) / float64(len(row.completed))
}

// vs returns row's completions as a fraction of ref's: the mean over seeds
// and the worst seed (runs are paired by seed).
func (row simRow) vs(ref simRow) (mean, worst float64) {
	worst = math.Inf(1)
	for i := range row.completed {
		f := float64(row.completed[i]) / float64(ref.completed[i])
		worst = min(worst, f)
	}
	return row.meanCompleted() / ref.meanCompleted(), worst
}

func simTable(title string, rows []simRow, oracle simRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", title)
	b.WriteString("| variant | completed (per seed) | vs oracle (worst seed) | tokens/s | refusals | Sluice rejects | provider TTFT p50 / p99 | client TTFT p99 | stream tokens/s p50 | mean limit per phase (2nd half) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, row := range rows {
		mean, worst := row.vs(oracle)
		var lims []string
		for _, l := range row.limits {
			lims = append(lims, fmt.Sprintf("%.1f", l))
		}
		dur := row.runs[0].phases[len(row.runs[0].phases)-1].to
		fmt.Fprintf(&b, "| %s | %v | %.1f%% (%.1f%%) | %.0f | %.0f | %.0f | %.2fs / %.2fs | %.2fs | %.1f | %s |\n",
			row.name, row.completed, 100*mean, 100*worst, row.tokens/dur.Seconds(), row.refusals, row.rejected,
			row.ttftP50.Seconds(), row.ttftP99.Seconds(), row.clientP99.Seconds(), row.rateP50, strings.Join(lims, " / "))
	}
	return b.String()
}
