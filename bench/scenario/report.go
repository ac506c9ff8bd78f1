package scenario

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	htmltemplate "html/template"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/sluicehq/sluice/bench/sim"
)

// Command is how the reports say they were made.
const Command = "sluice-bench scenarios -out docs/bench"

// chartFiles are the charts written per scenario: suffix and renderer.
var chartFiles = []chartFile{
	{"limit", "capacity, limit and requests inside the provider", LimitChart},
	{"ttft", "time to first token p99 per second", TTFTChart},
	{"goodput", "goodput over time", GoodputChart},
	{"rejections", "rejections per second", RejectionsChart},
}

type chartFile struct {
	Suffix, Alt string
	render      func(*Result) string
}

// The reports are templates: Markdown ones with text/template, the HTML
// page with html/template, which escapes every value it inserts.
var (
	//go:embed templates
	templateFS embed.FS

	funcs = template.FuncMap{
		"dur":          fmtDur,
		"floats":       joinFloats,
		"vsOracle":     vsOracle,
		"phases":       phaseNames,
		"describeSim":  describeSim,
		"describeLoad": describeLoad,
		"describeRun":  describeRun,
		"columns":      func() string { return columns },
		"command":      func() string { return Command },
		"charts":       func() []chartFile { return chartFiles },
		"hasOracle": func(r *Result) bool {
			for _, v := range r.Variants {
				if v.Variant.Oracle {
					return true
				}
			}
			return false
		},
	}
	markdown = template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.md"))
	htmlPage = htmltemplate.Must(htmltemplate.New("").Funcs(htmltemplate.FuncMap{"dur": fmtDur}).ParseFS(templateFS, "templates/report.html"))
)

// render executes the named template on data.
func render(name string, data any) string {
	var b strings.Builder
	if err := markdown.ExecuteTemplate(&b, name, data); err != nil {
		panic(fmt.Sprintf("scenario: template %s: %v", name, err)) // the templates are fixed: a bug
	}
	return b.String()
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
		if err := os.WriteFile(filepath.Join(dir, name+"-"+c.Suffix+".svg"), []byte(c.render(r)), 0o644); err != nil {
			return "", err
		}
	}
	if err := writeSummary(dir, r); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".md")
	return path, os.WriteFile(path, []byte(render("scenario.md", r)), 0o644)
}

// describeRun says how r was run.
func describeRun(r *Result) string {
	sc := r.Scenario
	mode := fmt.Sprintf("%v of model time at time scale %g (%v wall), seed %d", sc.Duration, r.TimeScale,
		time.Duration(float64(sc.Duration)*r.TimeScale).Round(time.Second), r.Seed)
	if r.Short {
		mode += ", **short mode** (reduced: numbers are not meaningful)"
	}
	return mode
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
	"Rejected by Sluice: requests Sluice turned away, 503 when the provider was at its limit (queue full, `max_wait` or the request's deadline out of reach) and 429 when a rate limit or a class's share had no room; they never reach the provider and " +
	"carry `X-Sluice-Rejected`. Client TTFT includes the wait in Sluice's queue; provider TTFT is measured by the " +
	"provider, from a request's arrival to its first token. ITL: gaps between tokens. Mean limit and inside provider (requests running or queued in " +
	"the provider) are averaged over the second half of each phase."

// Table returns the Markdown comparison table of r.
func Table(r *Result) string { return render("table", r) }

// phaseNames is " (phase / phase ...)" when r's scenario has several
// phases, else "".
func phaseNames(r *Result) string {
	if len(r.Scenario.Phases) < 2 {
		return ""
	}
	var names []string
	for _, p := range r.Scenario.Phases {
		names = append(names, p.Name)
	}
	return " (" + strings.Join(names, " / ") + ")"
}

// vsOracle is v's completed requests as a percentage of the oracle's among
// variants, or "–" without an oracle.
func vsOracle(variants []*VariantResult, v *VariantResult) string {
	for _, o := range variants {
		if o.Variant.Oracle && o.Summary.OK > 0 {
			return fmt.Sprintf("%.0f%%", 100*float64(v.Summary.OK)/float64(o.Summary.OK))
		}
	}
	return "–"
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
func ChecksMarkdown(checks []Check) string { return render("checks", checks) }

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
	var found []summaryFile
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
		found = append(found, sf)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(render("index.md", found)), 0o644)
}

// HTML renders r as a self-contained HTML page (inline SVG charts, no
// external resources) under title, with intro above the table. Every value
// is escaped by html/template; intro and the charts are inserted as they
// are, so intro must be HTML its caller built safely (a template).
func HTML(r *Result, title string, intro htmltemplate.HTML) []byte {
	page := struct {
		Title    string
		Intro    htmltemplate.HTML
		Variants []*VariantResult
		Charts   []htmltemplate.HTML
	}{Title: title, Intro: intro, Variants: r.Variants}
	for _, c := range chartFiles {
		page.Charts = append(page.Charts, htmltemplate.HTML(c.render(r))) // SVG from bench/chart, starting at <svg>
	}
	var b bytes.Buffer
	if err := htmlPage.ExecuteTemplate(&b, "report.html", page); err != nil {
		panic(fmt.Sprintf("scenario: HTML report: %v", err)) // the template is fixed: a bug
	}
	return b.Bytes()
}
