package scenario

import (
	"context"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/bench/load"
	"github.com/sluicehq/sluice/internal/testutil"
	"github.com/sluicehq/sluice/settings"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	)
}

// TestScenariosShort runs every scenario in short mode (see Shorten) and
// checks the machinery end to end: all its variants ran and completed
// requests through Sluice, no provider ever saw more requests than its
// variant allowed, samples were taken, and every report file was written
// and is well-formed. It asserts nothing about timing or which limiter
// wins: short runs are too short for that. A process-level test: about
// a minute of real sockets.
func TestScenariosShort(t *testing.T) {
	testutil.Process(t)
	dir := t.TempDir()
	var results []*Result
	for _, sc := range All() {
		r, err := Run(context.Background(), sc, Options{Short: true, TimeScale: 0.1, Seed: 7})
		if err != nil {
			t.Fatalf("%s: %v", sc.Name, err)
		}
		results = append(results, r)
		if len(r.Variants) != len(sc.variants()) {
			t.Fatalf("%s: %d variants ran, want %d", sc.Name, len(r.Variants), len(sc.variants()))
		}
		// How many samples a short run gets depends on how busy the
		// machine is (the sampler ticks in wall time): at least one must
		// have been taken, so that the checks below have something to read.
		if len(r.Samples) == 0 {
			t.Errorf("%s: no sample taken", sc.Name)
		}
		short := Shorten(sc)
		for i, v := range r.Variants {
			if v.Summary.OK == 0 {
				t.Errorf("%s/%s: no request completed: %+v", sc.Name, v.Variant.Name, v.Summary)
			}
			allowed := sc.Ceiling
			if v.Variant.Oracle {
				allowed = 0
				for _, st := range short.oracleSteps() {
					allowed = max(allowed, st.Capacity)
				}
			}
			if v.Provider.MaxInFlight > allowed {
				t.Errorf("%s/%s: provider saw %d requests in flight, the limit allows %d", sc.Name, v.Variant.Name, v.Provider.MaxInFlight, allowed)
			}
			if v.Variant.Name == "fixed-ceiling" {
				for _, smp := range r.Samples {
					if smp.V[i].Limit != sc.Ceiling {
						t.Fatalf("%s: fixed limit %d at %v, want the ceiling %d", sc.Name, smp.V[i].Limit, smp.T, sc.Ceiling)
					}
				}
			}
			// Provider-side TTFT is the provider's own count of first
			// tokens; every completed stream had one. A whole answer has
			// none.
			if sc.Load.NonStream {
				if v.ProviderTTFT.N != 0 || v.Provider.FirstTokens != 0 {
					t.Errorf("%s/%s: provider TTFT %+v over %d first tokens for whole answers, want none", sc.Name, v.Variant.Name, v.ProviderTTFT, v.Provider.FirstTokens)
				}
			} else if n := v.ProviderTTFT.N; n != int(v.Provider.FirstTokens) || n < v.Summary.OK || v.ProviderTTFT.P50 <= 0 {
				t.Errorf("%s/%s: provider TTFT %+v over %d first tokens, %d completed", sc.Name, v.Variant.Name, v.ProviderTTFT, v.Provider.FirstTokens, v.Summary.OK)
			}
			// Sluice's side of every sample comes from /admin/status.
			for _, smp := range r.Samples {
				if s := smp.V[i]; s.Limit <= 0 || s.Binding == "" {
					t.Fatalf("%s/%s: sample at %v without Sluice's state: %+v", sc.Name, v.Variant.Name, smp.T, s)
				}
			}
			if v.Provider.Open != 0 {
				t.Errorf("%s/%s: provider still has %d requests open after the run", sc.Name, v.Variant.Name, v.Provider.Open)
			}
		}
		md, err := WriteScenario(dir, r)
		if err != nil {
			t.Fatal(err)
		}
		text, _ := os.ReadFile(md)
		for _, v := range sc.variants() {
			if !strings.Contains(string(text), "| "+v.Label+" |") {
				t.Errorf("%s: report has no row for %s", sc.Name, v.Label)
			}
		}
		for _, c := range chartFiles {
			b, err := os.ReadFile(filepath.Join(dir, sc.Name+"-"+c.Suffix+".svg"))
			if err != nil {
				t.Fatal(err)
			}
			wellFormed(t, sc.Name+"-"+c.Suffix, b)
		}
		if h := HTML(r, "t", "<p>x</p>"); strings.Count(string(h), "<svg") != len(chartFiles) {
			t.Errorf("%s: HTML report should inline %d charts", sc.Name, len(chartFiles))
		}
	}
	if err := WriteIndex(dir); err != nil {
		t.Fatal(err)
	}
	index, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range All() {
		if !strings.Contains(string(index), "["+sc.Name+"]("+sc.Name+".md)") {
			t.Errorf("index has no row for %s", sc.Name)
		}
	}
	if c := results[0].Checks; len(c) != 3 {
		t.Errorf("capacity step should check 3 targets, got %+v", c)
	}
}

func wellFormed(t *testing.T, name string, b []byte) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(string(b)))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: not well-formed: %v", name, err)
		}
	}
}

// TestOracleFollowsSchedule checks that the oracle's ceiling is reloaded at
// each step of the capacity schedule. A process-level test: a scenario on
// real sockets, where a loaded machine delays the reload past the margin
// the samples allow.
func TestOracleFollowsSchedule(t *testing.T) {
	testutil.Process(t)
	sc := CapacityStep()
	v, _ := VariantByName("oracle")
	r, err := Run(context.Background(), sc, Options{Short: true, TimeScale: 0.1, Variants: []Variant{v}})
	if err != nil {
		t.Fatal(err)
	}
	short := Shorten(sc)
	for _, smp := range r.Samples {
		// Skip samples within a second of a step (the reload races the sample).
		near := false
		for _, st := range short.Sim.Schedule {
			if d := smp.T - st.At; d > -time.Second && d < time.Second {
				near = true
			}
		}
		if near {
			continue
		}
		if got, want := smp.V[0].Limit, short.capacityAt(smp.T); got != want {
			t.Errorf("at %v the oracle's limit is %d, capacity %d", smp.T, got, want)
		}
	}
}

func TestScaledConfig(t *testing.T) {
	sc := DecodeBound()
	g, _ := VariantByName("gradient2")
	cfg := providerConfig(sc, g, "http://127.0.0.1:1", 100, 0.25)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l := cfg.Providers[0].Limit
	if l.Window != 500*time.Millisecond || l.Cooldown != 500*time.Millisecond || l.PrefillRate != 32000 || l.MinTokenRate != 100 {
		t.Errorf("limits not scaled: %+v", l)
	}
	if q := cfg.Providers[0].Queue; q.MaxWait != 15*time.Second || q.MaxClientWait != 150*time.Second {
		t.Errorf("max_wait %v, max_client_wait %v, want 15s and 2m30s", q.MaxWait, q.MaxClientWait)
	}
	f, _ := VariantByName("fixed-ceiling")
	if l := providerConfig(sc, f, "http://127.0.0.1:1", 100, 0.25).Providers[0].Limit; l.MinTokenRate != 0 || l.Algorithm != settings.AlgorithmFixed {
		t.Errorf("tuning must not apply to fixed variants: %+v", l)
	}
	// Tiny ceilings stay valid (initial and min follow).
	if err := providerConfig(sc, f, "http://127.0.0.1:1", 1, 0.25).Validate(); err != nil {
		t.Error(err)
	}
}

// TestHTMLEscapes checks that the HTML report escapes what it shows (a
// label or title with markup stays text) and inlines each chart as one
// <svg> element with nothing before it.
func TestHTMLEscapes(t *testing.T) {
	t.Parallel()
	v := Variant{Name: "x", Label: `fixed <@> "50" & more`, Algorithm: settings.AlgorithmFixed, Color: "#000"}
	r := &Result{
		Scenario: &Scenario{Name: "t", Title: "title <b>"},
		Variants: []*VariantResult{{Variant: v}},
		Samples:  []Sample{{T: time.Second, V: []VariantSample{{Capacity: 4, Limit: 2}}}},
	}
	page := string(HTML(r, "a <script>x</script>", "<p>intro</p>"))
	for _, want := range []string{"<title>a &lt;script&gt;x&lt;/script&gt;</title>", "<h1>a &lt;script&gt;x&lt;/script&gt;</h1>",
		"<p>intro</p>", "<td>fixed &lt;@&gt; &#34;50&#34; &amp; more</td>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>") || strings.Contains(page, "<?xml") {
		t.Error("page holds unescaped markup or an XML declaration")
	}
	if n := strings.Count(page, "<figure><svg"); n != len(chartFiles) {
		t.Errorf("%d inline charts, want %d", n, len(chartFiles))
	}
}

// TestShapesSideBySide runs one scenario with both request shapes and
// checks that each sent its body and that the reports put them side by
// side: two rows per variant, a set of charts each, both in NAME.json and
// in the index.
func TestShapesSideBySide(t *testing.T) {
	for shape, want := range map[Shape]load.MaxTokens{ShapeMaxTokens: load.MaxTokensDrawn, ShapeNoMaxTokens: load.MaxTokensNone} {
		if got := loadConfig(CapacityStep(), &stack{}, 1, 1, shape).MaxTokens; got != want {
			t.Errorf("%v: load sends max_tokens %v, want %v", shape, got, want)
		}
	}
	if s, err := ParseShapes("both"); err != nil || len(s) != 2 {
		t.Fatalf("ParseShapes(both) = %v, %v", s, err)
	}
	if _, err := ParseShapes("some"); err == nil {
		t.Fatal("ParseShapes accepted some")
	}
	sc := CapacityStep()
	g, _ := VariantByName("gradient2")
	f, _ := VariantByName("fixed-ceiling")
	o, _ := VariantByName("oracle") // the targets need all three
	var rs []*Result
	for _, shape := range Shapes {
		r, err := Run(context.Background(), sc, Options{Short: true, TimeScale: 0.1, Seed: 3, Shape: shape, Variants: []Variant{g, f, o}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Shape != shape || len(r.Variants) != 3 || r.Variants[0].Summary.OK == 0 || len(r.Checks) != 3 {
			t.Fatalf("%v: result %+v", shape, r)
		}
		rs = append(rs, r)
	}
	dir := t.TempDir()
	md, err := WriteScenario(dir, rs[0], rs[1])
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(md)
	for _, v := range []Variant{g, f, o} {
		for _, shape := range Shapes {
			if row := "| " + v.Label + " | " + shape.Label() + " | "; !strings.Contains(string(text), row) {
				t.Errorf("report has no row %q:\n%s", row, text)
			}
		}
	}
	if !strings.Contains(string(text), "-shapes both") || !strings.Contains(string(text), "Targets (no max_tokens):") {
		t.Errorf("report:\n%s", text)
	}
	for _, shape := range Shapes {
		for _, c := range chartFiles {
			name := sc.Name + shape.suffix() + "-" + c.Suffix + ".svg"
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			wellFormed(t, name, b)
			if !strings.Contains(string(text), "]("+name+")") {
				t.Errorf("report does not show %s", name)
			}
		}
	}
	if err := WriteIndex(dir); err != nil {
		t.Fatal(err)
	}
	index, _ := os.ReadFile(filepath.Join(dir, "README.md"))
	if n := strings.Count(string(index), " | no max_tokens | "); n != 3 || !strings.Contains(string(index), "| variant | request |") {
		t.Errorf("index (%d no max_tokens rows):\n%s", n, index)
	}
	if tbl := Table(rs[0], rs[1]); strings.Count(tbl, "\n") != 2+6 {
		t.Errorf("table:\n%s", tbl)
	}
	// A single shape keeps the table as it was: no request column.
	if tbl := Table(rs[0]); strings.Contains(tbl, "request") || strings.Count(tbl, "\n") != 2+3 {
		t.Errorf("one shape's table:\n%s", tbl)
	}
}
