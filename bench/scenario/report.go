package scenario

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/sim"
)

// Command is how the reports say they were made.
const Command = "sluice-bench scenarios -out docs/bench"

// chartFiles are the charts written per scenario: suffix and renderer.
var chartFiles = []struct {
	suffix, alt string
	render      func(*Result) string
}{
	{"limit", "capacity, limit and requests inside the provider", LimitChart},
	{"ttft", "time to first token p99 per second", TTFTChart},
	{"goodput", "goodput over time", GoodputChart},
	{"rejections", "rejections per second", RejectionsChart},
}

// WriteScenario writes r's report into dir: NAME.md with the table,
// NAME-*.svg charts and NAME.json (the summaries, for WriteIndex). It
// returns the Markdown file's path.
func WriteScenario(dir string, r *Result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := r.Scenario.Name
	for _, c := range chartFiles {
		if err := os.WriteFile(filepath.Join(dir, name+"-"+c.suffix+".svg"), []byte(c.render(r)), 0o644); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	sc := r.Scenario
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", sc.Title, sc.About)
	writeSetup(&b, r)
	b.WriteString("\n")
	b.WriteString(Table(r))
	b.WriteString("\n" + columns + "\n")
	if len(r.Checks) > 0 {
		b.WriteString("\nTargets (gradient2, Sluice's default):\n\n")
		b.WriteString(ChecksMarkdown(r.Checks))
	}
	b.WriteString("\n")
	for _, c := range chartFiles {
		fmt.Fprintf(&b, "![%s](%s-%s.svg)\n\n", c.alt, name, c.suffix)
	}
	if err := writeSummary(dir, r); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".md")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeSetup describes the provider, the load, Sluice's settings and the
// run.
func writeSetup(b *strings.Builder, r *Result) {
	sc := r.Scenario
	fmt.Fprintf(b, "- **Provider** (bench/sim): %s.\n", describeSim(sc.Sim))
	fmt.Fprintf(b, "- **Load**: %s.\n", describeLoad(sc.Load))
	fmt.Fprintf(b, "- **Sluice**: limit.ceiling %d; other settings at their defaults (window 2 s, cooldown 2 s, queue 200 / max_wait 10 s, prefill 8,000 tokens/s)", sc.Ceiling)
	if sc.Tune != nil {
		b.WriteString(", plus the scenario's tuning noted above")
	}
	b.WriteString(". ")
	if sc.OracleNote != "" {
		fmt.Fprintf(b, "Oracle: fixed at %s.\n", sc.OracleNote)
	} else {
		b.WriteString("Oracle: fixed at the capacity in force, reloaded with that limit.ceiling at each step.\n")
	}
	mode := fmt.Sprintf("%v of model time at time scale %g (%v wall), seed %d", sc.Duration, r.TimeScale,
		time.Duration(float64(sc.Duration)*r.TimeScale).Round(time.Second), r.Seed)
	if r.Short {
		mode += ", **short mode** (reduced: numbers are not meaningful)"
	}
	fmt.Fprintf(b, "- **Run**: %s; all four variants at once, each with its own provider and Sluice over loopback. Times are model time. `%s -run %s`.\n",
		mode, Command, sc.Name)
}

func describeSim(c sim.Config) string {
	var parts []string
	if len(c.Schedule) > 0 {
		parts = append(parts, "capacity "+describeSchedule(c.Schedule))
	}
	switch {
	case c.OverloadFactor < 0:
		parts = append(parts, "never refuses (unbounded internal queue)")
	default:
		f := c.OverloadFactor
		if f == 0 {
			f = sim.DefaultOverloadFactor
		}
		parts = append(parts, fmt.Sprintf("queues beyond C and answers 429 once running+queued >= %g C", f))
	}
	if c.RateLimitRPS > 0 {
		parts = append(parts, fmt.Sprintf("rate limit %g requests/s (burst %d) with 429 and retry-after", c.RateLimitRPS, max(c.RateLimitBurst, 1)))
	}
	jit := c.JitterSigma
	if jit == 0 {
		jit = sim.DefaultJitterSigma
	}
	parts = append(parts, fmt.Sprintf("TTFT (0.25 s + prompt/8,000 tokens/s) x lognormal(sigma %g)", jit))
	itlLoad := c.ITLLoad
	if itlLoad == 0 {
		itlLoad = sim.DefaultITLLoad
	}
	if itlLoad == 1 {
		parts = append(parts, "inter-token latency 20 ms x (1 + running/C)")
	} else {
		parts = append(parts, fmt.Sprintf("inter-token latency 20 ms x (1 + %g running/C)", itlLoad))
	}
	return strings.Join(parts, "; ")
}

func describeSchedule(steps []sim.Step) string {
	var parts []string
	for i, st := range steps {
		if i == 0 {
			parts = append(parts, fmt.Sprint(st.Capacity))
			continue
		}
		parts = append(parts, fmt.Sprintf("%d from %v", st.Capacity, st.At))
	}
	if len(parts) > 6 {
		parts = append(parts[:3], "…", parts[len(parts)-1])
	}
	return strings.Join(parts, ", ")
}

func describeLoad(l Load) string {
	var s string
	switch {
	case l.Clients > 0:
		s = fmt.Sprintf("%d closed-loop clients, think time exponential with mean %v", l.Clients, l.Think)
	case l.RateAt != nil:
		s = fmt.Sprintf("open loop, Poisson, time-varying rate up to %g/s", l.MaxRate)
	default:
		s = fmt.Sprintf("open loop, Poisson at %g requests/s", l.Rate)
	}
	return s + fmt.Sprintf("; all streaming; prompts lognormal mean %g tokens (sigma %g, max %d); outputs lognormal mean %g (sigma %g, max %d)",
		l.Prompt.Mean, l.Prompt.Sigma, l.Prompt.Max, l.Output.Mean, l.Output.Sigma, l.Output.Max)
}

// columns explains Table's columns.
const columns = "Completed: streams that ended normally within the run. Provider 429/529: requests the provider refused. " +
	"Sluice 429: requests Sluice's queue turned away (full, or `max_wait` reached); they never reach the provider and " +
	"carry `X-Sluice-Rejected`. Client TTFT includes the wait in Sluice's queue; provider TTFT is measured by the " +
	"provider, from a request's arrival to its first token. ITL: gaps between tokens. Mean limit and inside provider (requests running or queued in " +
	"the provider) are averaged over the second half of each phase."

// Table returns the Markdown comparison table of r.
func Table(r *Result) string {
	var b strings.Builder
	phases := ""
	if len(r.Scenario.Phases) > 1 {
		var names []string
		for _, p := range r.Scenario.Phases {
			names = append(names, p.Name)
		}
		phases = " (" + strings.Join(names, " / ") + ")"
	}
	fmt.Fprintf(&b, "| variant | completed | vs oracle | goodput tokens/s | provider 429/529 | Sluice 429 | failed | client TTFT p50 / p99 | provider TTFT p50 / p99 | ITL p50 | mean limit%s | inside provider%s |\n", phases, phases)
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	oracle := r.Variant("oracle")
	for _, v := range r.Variants {
		s := v.Summary
		vs := "–"
		if oracle != nil && oracle.Summary.OK > 0 {
			vs = fmt.Sprintf("%.0f%%", 100*float64(s.OK)/float64(oracle.Summary.OK))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %.0f | %d | %d | %d | %s / %s | %s / %s | %s | %s | %s |\n",
			v.Variant.Label, s.OK, vs, s.TokensPerSecond, v.UpstreamRejected, s.RejectedSluice, s.Failed,
			fmtDur(s.TTFT.P50), fmtDur(s.TTFT.P99), fmtDur(v.ProviderTTFT.P50), fmtDur(v.ProviderTTFT.P99),
			fmtDur(s.ITL.P50), joinFloats(v.PhaseLimit), joinFloats(v.PhaseInflight))
	}
	return b.String()
}

func joinFloats(v []float64) string {
	var parts []string
	for _, f := range v {
		parts = append(parts, fmt.Sprintf("%.1f", f))
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, " / ")
}

// ChecksMarkdown renders targets as a list.
func ChecksMarkdown(checks []Check) string {
	var b strings.Builder
	for _, c := range checks {
		mark := "met"
		if !c.Met {
			mark = "**not met**"
		}
		fmt.Fprintf(&b, "- %s: %s — %s\n", c.Target, c.Got, mark)
	}
	return b.String()
}

// summaryFile is what NAME.json holds: enough to rebuild the index.
type summaryFile struct {
	Scenario  string
	Title     string
	TimeScale float64
	Seed      uint64
	Short     bool
	Checks    []Check
	Variants  []*VariantResult
}

func writeSummary(dir string, r *Result) error {
	js, err := json.MarshalIndent(summaryFile{r.Scenario.Name, r.Scenario.Title, r.TimeScale, r.Seed, r.Short, r.Checks, r.Variants}, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, r.Scenario.Name+".json"), append(js, '\n'), 0o644)
}

// WriteIndex writes dir/README.md: one row per scenario and variant, from
// the NAME.json files of every scenario of All found in dir (so running a
// subset of scenarios keeps the others' rows).
func WriteIndex(dir string) error {
	var b strings.Builder
	b.WriteString("# Scenario benchmarks\n\n")
	fmt.Fprintf(&b, "Made by `%s` (BENCHMARKS.md explains how to read them). Every scenario runs four limiters at the same time "+
		"against identical simulated providers with the same seed; times are model time.\n\n", Command)
	b.WriteString("| scenario | variant | completed | vs oracle | provider 429/529 | Sluice 429 | client TTFT p50 | client TTFT p99 | provider TTFT p99 |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, sc := range All() {
		js, err := os.ReadFile(filepath.Join(dir, sc.Name+".json"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		var sf summaryFile
		if err := json.Unmarshal(js, &sf); err != nil {
			return fmt.Errorf("%s.json: %w", sc.Name, err)
		}
		var oracle *VariantResult
		for _, v := range sf.Variants {
			if v.Variant.Oracle {
				oracle = v
			}
		}
		for i, v := range sf.Variants {
			name := ""
			if i == 0 {
				name = fmt.Sprintf("[%s](%s.md)", sc.Name, sc.Name)
				if sf.Short {
					name += " (short)"
				}
			}
			vs := "–"
			if oracle != nil && oracle.Summary.OK > 0 {
				vs = fmt.Sprintf("%.0f%%", 100*float64(v.Summary.OK)/float64(oracle.Summary.OK))
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %d | %s | %s | %s |\n", name, v.Variant.Label, v.Summary.OK, vs,
				v.UpstreamRejected, v.Summary.RejectedSluice, fmtDur(v.TTFT.P50), fmtDur(v.TTFT.P99), fmtDur(v.ProviderTTFT.P99))
		}
	}
	b.WriteString("\n" + columns + "\n")
	b.WriteString("\nThe overhead runs (`sluice-bench overhead -out docs/bench`) write [overhead.md](overhead.md).\n")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(b.String()), 0o644)
}

// HTML renders r as a self-contained HTML page (inline SVG charts, no
// external resources) with intro (trusted HTML) above the table.
func HTML(r *Result, title, intro string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `<!doctype html><html><head><meta charset="utf-8"><title>%s</title>
<style>body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}figure{margin:1.5em 0}</style></head><body>
<h1>%s</h1>
`, html.EscapeString(title), html.EscapeString(title))
	b.WriteString(intro)
	b.WriteString("<table><tr><th>variant</th><th>completed</th><th>goodput tokens/s</th><th>provider 429/529</th><th>Sluice 429</th><th>failed</th><th>client TTFT p50 / p99</th><th>provider TTFT p50 / p99</th><th>ITL p50</th><th>mean limit</th></tr>\n")
	for _, v := range r.Variants {
		s := v.Summary
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td><td>%.0f</td><td>%d</td><td>%d</td><td>%d</td><td>%s / %s</td><td>%s / %s</td><td>%s</td><td>%.1f</td></tr>\n",
			html.EscapeString(v.Variant.Label), s.OK, s.TokensPerSecond, v.UpstreamRejected, s.RejectedSluice, s.Failed,
			fmtDur(s.TTFT.P50), fmtDur(s.TTFT.P99), fmtDur(v.ProviderTTFT.P50), fmtDur(v.ProviderTTFT.P99), fmtDur(s.ITL.P50), v.MeanLimit)
	}
	b.WriteString("</table>\n")
	for _, c := range chartFiles {
		fmt.Fprintf(&b, "<figure>%s</figure>\n", c.render(r))
	}
	b.WriteString("</body></html>\n")
	return []byte(b.String())
}
