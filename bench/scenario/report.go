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
		"describeBody": describeBody,
		"suffix":       func(r *Result) string { return r.Shape.suffix() },
		"command":      func() string { return Command },
		"runFlags":     runFlags,
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

// report is one scenario's results as the templates see them: one Result
// per request shape, in the order run (Runs), the first of them embedded
// so that .Scenario, .Variants and .Checks read as for a single run.
type report struct {
	*Result
	Runs []*Result
}

func newReport(r *Result, more []*Result) report {
	return report{Result: r, Runs: append([]*Result{r}, more...)}
}

// Both says whether the report has several request shapes: its tables
// then have two rows per variant, one per shape.
func (r report) Both() bool { return len(r.Runs) > 1 }

// WriteScenario writes the report of r, and of more (the same scenario
// run with other request shapes, reported beside it), into dir: NAME.md
// with the table, NAME-*.svg charts (NAME-no-max-tokens-*.svg for that
// shape) and NAME.json (the summaries, for WriteIndex). It returns the
// Markdown file's path.
func WriteScenario(dir string, r *Result, more ...*Result) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	rep := newReport(r, more)
	name := r.Scenario.Name
	for _, run := range rep.Runs {
		for _, c := range chartFiles {
			file := name + run.Shape.suffix() + "-" + c.Suffix + ".svg"
			if err := os.WriteFile(filepath.Join(dir, file), []byte(c.render(run)), 0o644); err != nil {
				return "", err
			}
		}
	}
	if err := writeSummary(dir, rep); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".md")
	return path, os.WriteFile(path, []byte(render("scenario.md", rep)), 0o644)
}

// describeBody says what the requests' bodies held.
func describeBody(r report) string {
	const same = "the provider gets the drawn output length in x-sim-output-tokens whatever the body says, so it gives the same answers"
	switch {
	case r.Both():
		return "run twice, one run after the other with the same seed: once naming each request's drawn output size as `max_tokens` " +
			"(the rows marked max_tokens), once without `max_tokens`, as most chat code sends (no max_tokens); " + same
	case r.Shape == ShapeNoMaxTokens:
		return "no `max_tokens`, as most chat code sends; " + same
	}
	return "each request names its drawn output size as `max_tokens`"
}

// runFlags are the flags that name r's scenario and how it ran.
func runFlags(r *Result) string {
	sc := r.Scenario
	s := "-run " + sc.Name
	if sc.scaledFrom != "" {
		s = fmt.Sprintf("-run %s -capacity %d", sc.scaledFrom, sc.Capacity)
	}
	if r.Apart {
		s += " -apart"
	}
	return s
}

// describeRun says how r was run.
func describeRun(r *Result) string {
	sc := r.Scenario
	mode := fmt.Sprintf("%v of model time at time scale %g (%v wall), seed %d", sc.Duration, r.TimeScale,
		time.Duration(float64(sc.Duration)*r.TimeScale).Round(time.Second), r.Seed)
	if r.Short {
		mode += ", **short mode** (reduced: numbers are not meaningful)"
	}
	if r.Apart {
		mode += "; the variants one after the other, each on the whole machine, each with its own provider and Sluice over loopback"
	} else {
		mode += fmt.Sprintf("; all %d variants at once, each with its own provider and Sluice over loopback", len(r.Variants))
	}
	return mode
}

func describeSim(c sim.Config) string {
	var parts []string
	switch c.Shape {
	case sim.ShapeKnee:
		parts = append(parts, "knee "+describeSchedule(c.Schedule)+": every request runs at once, TTFT and inter-token latency x running/C beyond C")
	case sim.ShapeNoKnee:
		rise := c.Rise
		if rise == 0 {
			rise = sim.DefaultRise
		}
		parts = append(parts, fmt.Sprintf("no knee: every request runs at once, never refused for load, TTFT and inter-token latency x (1 + %g running/C), C = %s", rise, describeSchedule(c.Schedule)))
		return strings.Join(parts, "; ")
	default:
		if len(c.Schedule) > 0 {
			parts = append(parts, "capacity "+describeSchedule(c.Schedule))
		}
	}
	switch {
	case c.Shape == sim.ShapeKnee:
		f := c.OverloadFactor
		if f == 0 {
			f = sim.DefaultOverloadFactor
		}
		if f > 0 {
			parts = append(parts, fmt.Sprintf("answers 429 once running >= %g C", f))
		}
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
	if c.Shape == sim.ShapeKnee {
		return strings.Join(parts, "; ")
	}
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

// Table returns the Markdown comparison table of r, with rows for more
// (the same scenario with other request shapes) beside each variant's.
func Table(r *Result, more ...*Result) string { return render("table", newReport(r, more)) }

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
	// Shape is the request body of Checks and Variants (absent from
	// files written before issue 25, which are max_tokens).
	Shape    Shape
	Checks   []Check
	Variants []*VariantResult
	// More holds the runs with other request shapes, when there were
	// several (sluice-bench scenarios -shapes both).
	More []shapeRun `json:",omitempty"`
}

// shapeRun is one more request shape's run in a summaryFile.
type shapeRun struct {
	Shape    Shape
	Checks   []Check
	Variants []*VariantResult
}

// Runs returns every run of the file, its first shape first.
func (f summaryFile) Runs() []shapeRun {
	return append([]shapeRun{{f.Shape, f.Checks, f.Variants}}, f.More...)
}

func writeSummary(dir string, rep report) error {
	r := rep.Result
	sf := summaryFile{r.Scenario.Name, r.Scenario.Title, r.TimeScale, r.Seed, r.Short, r.Shape, r.Checks, r.Variants, nil}
	for _, m := range rep.Runs[1:] {
		sf.More = append(sf.More, shapeRun{m.Shape, m.Checks, m.Variants})
	}
	js, err := json.MarshalIndent(sf, "", " ")
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
	both := false
	for _, f := range found {
		both = both || len(f.More) > 0
	}
	idx := struct {
		Files []summaryFile
		Both  bool
	}{found, both}
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(render("index.md", idx)), 0o644)
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
