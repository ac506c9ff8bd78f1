// Package demo is `sluice-bench demo`, what `make demo` runs: a simulated
// provider whose capacity steps 40 -> 20 -> 40, Sluice with gradient2 in
// front of it, and 200 streaming clients, with an identical provider
// behind a fixed limit (what a static gateway does) running at the same
// time for comparison. It prints a live line per second, a final
// comparison, and writes a self-contained HTML report with the charts.
//
// Both variants run concurrently in one process, each with its own
// simulated provider (same schedule, same seed, started at the same
// instant), its own Sluice and its own load generator (same seed), so they
// see the same clients in the same wall time.
package demo

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/bench/scenario"
	"github.com/sluicehq/sluice/bench/sim"
)

// Model is the demo's length in provider (model) time; Options.Duration
// sets the wall time, and so the time scale.
const Model = 120 * time.Second

// Options configure the demo. Zero values take the defaults.
type Options struct {
	// Duration is the wall time of the run; default 60 s, at least 5 s.
	Duration time.Duration
	// Clients is the number of closed-loop clients; default 200.
	Clients int
	// Ceiling is the fixed limit compared against (and gradient2's
	// ceiling); default 50.
	Ceiling int
	// Seed seeds providers and load; default 1.
	Seed uint64
	// Report is the HTML report's path; "" writes report.html in a new
	// temporary directory.
	Report string
	// OutputTokens overrides the mean output length (tests); 0 keeps 250.
	OutputTokens int
}

// Summary is what the demo measured.
type Summary struct {
	Result *scenario.Result
	// Report is the path of the HTML report.
	Report string
}

// Scenario returns the demo scenario for opt (defaults applied).
func Scenario(opt Options) *scenario.Scenario {
	sc := scenario.CapacityStep()
	sc.Name = "demo"
	sc.Title = fmt.Sprintf("Sluice demo: capacity 40 → 20 → 40, gradient2 vs fixed @ %d", opt.Ceiling)
	sc.Duration = Model
	sc.Sim.Schedule = []sim.Step{{Capacity: 40}, {At: Model / 3, Capacity: 20}, {At: 2 * Model / 3, Capacity: 40}}
	sc.Phases = []scenario.Phase{{Name: "C=40", From: 0, To: Model / 3}, {Name: "C=20", From: Model / 3, To: 2 * Model / 3}, {Name: "C=40 again", From: 2 * Model / 3, To: Model}}
	sc.Ceiling = opt.Ceiling
	sc.Load.Clients = opt.Clients
	if opt.OutputTokens > 0 {
		sc.Load.Output = load.Dist{Mean: float64(opt.OutputTokens), Sigma: 0.5, Max: 4 * opt.OutputTokens}
	}
	sc.Targets = nil
	return sc
}

func (o *Options) defaults() error {
	if o.Duration == 0 {
		o.Duration = time.Minute
	}
	if o.Duration < 5*time.Second {
		return errors.New("demo: -duration must be at least 5s")
	}
	if o.Duration > 2*Model {
		return fmt.Errorf("demo: -duration must be at most %v", 2*Model)
	}
	if o.Clients <= 0 {
		o.Clients = 200
	}
	if o.Ceiling <= 0 {
		o.Ceiling = 50
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return nil
}

// Run runs the demo, writing progress and the summary to out.
func Run(ctx context.Context, opt Options, out io.Writer) (*Summary, error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	scale := float64(opt.Duration) / float64(Model)
	sc := Scenario(opt)
	g, _ := scenario.VariantByName("gradient2")
	f, _ := scenario.VariantByName("fixed-ceiling")
	f.Label = fmt.Sprintf("fixed @ %d", opt.Ceiling)

	fmt.Fprintf(out, "Sluice demo: a simulated LLM provider whose hidden capacity drops from 40 to 20\n"+
		"concurrent streams and comes back, %d clients streaming chat completions through\n"+
		"Sluice (gradient2). Alongside, an identical provider behind a fixed limit of %d, as a\n"+
		"static gateway would set, gets the same clients at the same time.\n", opt.Clients, opt.Ceiling)
	fmt.Fprintf(out, "The provider's clock runs %.3gx faster than the wall clock: %v of provider time in %v.\n"+
		"Times below are provider time. Capacity steps at %v and %v. Each line: the provider's\n"+
		"capacity, Sluice's limit, requests in flight and waiting in Sluice's queue, time to first\n"+
		"token at the provider (its queue and prefill) and at the client (queue wait included),\n"+
		"over the first tokens of the last second, provider 429s (and the fixed limit's),\n"+
		"and Sluice's own 429s (queue full or waited too long).\n\n", 1/scale, Model, opt.Duration, Model/3, 2*Model/3)

	lp := &liveLine{out: out, scale: scale, total: opt.Duration}
	res, err := scenario.Run(ctx, sc, scenario.Options{
		TimeScale:   scale,
		Seed:        opt.Seed,
		Variants:    []scenario.Variant{g, f},
		SampleEvery: time.Duration(float64(time.Second) / scale), // one line per wall second
		OnSample:    lp.print,
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintln(out)
	printSummary(out, res, opt)

	path := opt.Report
	if path == "" {
		dir, err := os.MkdirTemp("", "sluice-demo-")
		if err != nil {
			return nil, err
		}
		path = filepath.Join(dir, "report.html")
	}
	var intro strings.Builder
	if err := introHTML.Execute(&intro, struct {
		Model, Duration  time.Duration
		Clients, Ceiling int
	}{Model, opt.Duration, opt.Clients, opt.Ceiling}); err != nil {
		return nil, err
	}
	page := scenario.HTML(res, sc.Title, template.HTML(intro.String())) // built by introHTML
	if err := os.WriteFile(path, page, 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "\nHTML report with charts: %s\n", path)
	return &Summary{Result: res, Report: path}, nil
}

// introHTML is the paragraph above the HTML report's table.
var introHTML = template.Must(template.New("intro").Parse(`<p>A simulated provider whose capacity steps 40 → 20 → 40 over {{.Model}} of provider time (run in {{.Duration}}), ` +
	`{{.Clients}} closed-loop streaming clients. <b>gradient2</b> is Sluice's default adaptive limit; <b>fixed @ {{.Ceiling}}</b> is a static ` +
	`limit on an identical provider that ran at the same time with the same seed. Times are provider time; ` +
	`client TTFT includes the wait in Sluice's queue.</p>`))

// liveLine prints one line per sample for the gradient2 variant (index 0)
// with the fixed variant's 429s for comparison.
type liveLine struct {
	out   io.Writer
	scale float64
	total time.Duration
}

func (l *liveLine) print(s scenario.Sample) {
	g, f := s.V[0], s.V[1]
	wall := time.Duration(float64(s.T) * l.scale)
	frac := min(max(float64(wall)/float64(l.total), 0), 1)
	const width = 20
	n := int(frac*width + 0.5)
	bar := strings.Repeat("#", n) + strings.Repeat(".", width-n)
	pair := func(a, b time.Duration) string {
		if a <= 0 {
			return "    –/–    "
		}
		return fmt.Sprintf("%5s/%-5s", short(a), short(b))
	}
	fmt.Fprintf(l.out, "[%s] %3.0f%% %4.0fs  capacity %2d  limit %2d  in flight %2d  queued %3d  TTFT p50/p99 provider %s client %s  429s %d (fixed %d)  rejected %d\n",
		bar, 100*frac, s.T.Seconds(), g.Capacity, g.Limit, g.Inflight, g.Waiting,
		pair(g.ProviderTTFTP50, g.ProviderTTFTP99), pair(g.TTFTP50, g.TTFTP99),
		g.UpstreamRejected, f.UpstreamRejected, g.SluiceRejected)
}

// short formats a duration in at most five characters.
func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	default:
		return fmt.Sprintf("%.0fs", d.Seconds())
	}
}

func printSummary(out io.Writer, r *scenario.Result, opt Options) {
	g, f := r.Variants[0], r.Variants[1]
	row := func(name, a, b string) { fmt.Fprintf(out, "  %-34s %18s %18s\n", name, a, b) }
	fmt.Fprintf(out, "Summary (%v of provider time, both run at the same time on identical providers):\n\n", Model)
	row("", g.Variant.Label, f.Variant.Label)
	row("completed streams", fmt.Sprint(g.Summary.OK), fmt.Sprint(f.Summary.OK))
	row("goodput (output tokens/s)", fmt.Sprintf("%.0f", g.Summary.TokensPerSecond), fmt.Sprintf("%.0f", f.Summary.TokensPerSecond))
	row("provider 429/529s", fmt.Sprint(g.UpstreamRejected), fmt.Sprint(f.UpstreamRejected))
	row("rejected by Sluice (503/429)", fmt.Sprint(g.Summary.RejectedSluice), fmt.Sprint(f.Summary.RejectedSluice))
	row("client TTFT p50 / p99", short(g.TTFT.P50)+" / "+short(g.TTFT.P99), short(f.TTFT.P50)+" / "+short(f.TTFT.P99))
	row("provider TTFT p50 / p99", short(g.ProviderTTFT.P50)+" / "+short(g.ProviderTTFT.P99), short(f.ProviderTTFT.P50)+" / "+short(f.ProviderTTFT.P99))
	lim := func(v *scenario.VariantResult) string {
		var parts []string
		for _, x := range v.PhaseLimit {
			parts = append(parts, fmt.Sprintf("%.0f", x))
		}
		return strings.Join(parts, " / ")
	}
	row("limit at C=40 / 20 / 40", lim(g), lim(f))
	fmt.Fprintln(out)
	printAccounts(out, row, g, f)
	fmt.Fprintln(out)
	for _, line := range comparison(g, f) {
		fmt.Fprintln(out, line)
	}
}

// comparison states how gradient2 (g) did against the fixed limit (f), one
// sentence per measure, from the measured numbers whatever they are.
func comparison(g, f *scenario.VariantResult) []string {
	name := f.Variant.Label
	var lines []string
	if f.Summary.OK > 0 {
		lines = append(lines, fmt.Sprintf("gradient2 completed %s streams (%d vs %d with %s).",
			relative(float64(g.Summary.OK), float64(f.Summary.OK), "as many"), g.Summary.OK, f.Summary.OK, name))
	}
	if f.Summary.TokensPerSecond > 0 {
		lines = append(lines, fmt.Sprintf("It delivered %s output tokens per second (%.0f vs %.0f).",
			relative(g.Summary.TokensPerSecond, f.Summary.TokensPerSecond, "as many"), g.Summary.TokensPerSecond, f.Summary.TokensPerSecond))
	}
	switch gr, fr := g.UpstreamRejected, f.UpstreamRejected; {
	case fr > 0 && gr == 0:
		lines = append(lines, fmt.Sprintf("The provider refused nothing with gradient2; %s drew %d refusals.", name, fr))
	case fr > gr:
		lines = append(lines, fmt.Sprintf("It drew %.0fx fewer refusals from the provider (%d vs %d).", float64(fr)/float64(gr), gr, fr))
	default:
		lines = append(lines, fmt.Sprintf("It drew %d refusals from the provider; %s drew %d.", gr, name, fr))
	}
	if gp, fp := g.ProviderTTFT.P99, f.ProviderTTFT.P99; gp > 0 && fp > 0 {
		word := "lower"
		if gp >= fp {
			word = "not lower"
		}
		lines = append(lines, fmt.Sprintf("Its provider TTFT p99 was %s: %s vs %s.", word, short(gp), short(fp)))
	}
	return lines
}

// relative says a/b in words: "98% as many", "as many", "12% more".
func relative(a, b float64, same string) string {
	r := a / b
	switch {
	case math.Round(100*r) == 100:
		return same
	case r > 1:
		return fmt.Sprintf("%.0f%% more", 100*(r-1))
	default:
		return fmt.Sprintf("%.0f%% %s", 100*r, same)
	}
}

// account is where every request a variant's clients sent went: one row
// per way a request ends, refusals by Sluice by reason, and what the
// clients and Sluice retried. The rows under "requests sent" add up to it,
// and so do Sluice's reasons to its refusals (TestAccountsAddUp).
type account struct {
	sent, completed, refusedProvider, refusedSluice, failed, cut int
	// bySluice counts refusedSluice by reason, reasons sorted.
	bySluice []reasonCount
	// clientRetries counts the sent requests that were an SDK's retries;
	// givenUp the calls that ended without an answer.
	clientRetries, calls, givenUp int
	// providerRefusals counts the provider's 429/529 answers; retriedBySluice
	// those Sluice retried itself (the client never saw them).
	providerRefusals, retriedBySluice int
}

type reasonCount struct {
	reason string
	n      int
}

func accountOf(v *scenario.VariantResult) account {
	s := v.Summary
	a := account{
		sent: s.Requests + s.Cut, completed: s.OK, refusedProvider: s.RejectedUpstream,
		refusedSluice: s.RejectedSluice, failed: s.Failed, cut: s.Cut,
		clientRetries: s.Retries, calls: s.Calls.Calls + s.Calls.Cut, givenUp: s.Calls.Failed,
		providerRefusals: int(v.UpstreamRejected),
	}
	a.retriedBySluice = max(a.providerRefusals-a.refusedProvider, 0)
	for r, n := range s.Rejected {
		a.bySluice = append(a.bySluice, reasonCount{r, n})
	}
	slices.SortFunc(a.bySluice, func(x, y reasonCount) int { return strings.Compare(x.reason, y.reason) })
	return a
}

// printAccounts prints where the requests of g and f went.
func printAccounts(out io.Writer, row func(name, a, b string), g, f *scenario.VariantResult) {
	ag, af := accountOf(g), accountOf(f)
	n := func(x int) string { return fmt.Sprint(x) }
	fmt.Fprintf(out, "Where the clients' requests went. A client sends its next request a think time after\n"+
		"its last one ended, refused or not: a refusal counts an attempt, not a lost piece of\n"+
		"work, and a variant that refuses fast is asked again sooner, so its refusals pile up.\n\n")
	row("requests sent", n(ag.sent), n(af.sent))
	row("  completed", n(ag.completed), n(af.completed))
	row("  refused by the provider", n(ag.refusedProvider), n(af.refusedProvider))
	row("  refused by Sluice", n(ag.refusedSluice), n(af.refusedSluice))
	reasons := map[string][2]int{}
	var names []string
	for i, a := range []account{ag, af} {
		for _, rc := range a.bySluice {
			if _, ok := reasons[rc.reason]; !ok {
				names = append(names, rc.reason)
			}
			c := reasons[rc.reason]
			c[i] = rc.n
			reasons[rc.reason] = c
		}
	}
	slices.Sort(names)
	for _, r := range names {
		row("    "+r, n(reasons[r][0]), n(reasons[r][1]))
	}
	row("  failed (errors, timeouts)", n(ag.failed), n(af.failed))
	row("  still running at the end", n(ag.cut), n(af.cut))
	row("of them SDK retries", n(ag.clientRetries), n(af.clientRetries))
	row("calls given up (no answer)", n(ag.givenUp), n(af.givenUp))
	row("provider 429/529s Sluice retried", n(ag.retriedBySluice), n(af.retriedBySluice))
}
