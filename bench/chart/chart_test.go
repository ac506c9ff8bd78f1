package chart

import (
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// svgDoc is what the tests read back from a chart: it must parse as XML.
type svgDoc struct {
	paths      []svgPath
	texts      []string
	textStyles []string // of each text
}

type svgPath struct{ d, style string }

// parse fails the test unless s is a well-formed SVG document, and returns
// its paths and texts.
func parse(t *testing.T, s string) svgDoc {
	t.Helper()
	if !strings.HasPrefix(s, "<svg") {
		t.Fatalf("document does not start with <svg: %.60q", s)
	}
	var doc svgDoc
	d := xml.NewDecoder(strings.NewReader(s))
	inText := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return doc
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			switch tok.Name.Local {
			case "path":
				var p svgPath
				for _, a := range tok.Attr {
					switch a.Name.Local {
					case "d":
						p.d = a.Value
					case "style":
						p.style = a.Value
					}
				}
				doc.paths = append(doc.paths, p)
			case "text":
				inText = true
				doc.texts = append(doc.texts, "")
				style := ""
				for _, a := range tok.Attr {
					if a.Name.Local == "style" {
						style = a.Value
					}
				}
				doc.textStyles = append(doc.textStyles, style)
			}
			for _, a := range tok.Attr {
				if a.Name.Local == "href" || strings.Contains(a.Value, "url(") {
					t.Errorf("external or linked resource: <%s %s=%q>", tok.Name.Local, a.Name.Local, a.Value)
				}
			}
		case xml.CharData:
			if inText {
				doc.texts[len(doc.texts)-1] += string(tok)
			}
		case xml.EndElement:
			inText = false
		}
	}
}

// stroked returns the paths drawn in colour hex ("#RRGGBB").
func (d svgDoc) stroked(hex string) []svgPath {
	var out []svgPath
	for _, p := range d.paths {
		if strings.Contains(p.style, "stroke:"+strings.ToUpper(hex)+";") {
			out = append(out, p)
		}
	}
	return out
}

// points returns the vertices of path data made of M and L commands.
func points(t *testing.T, d string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, cmd := range strings.FieldsFunc(d, func(r rune) bool { return r == 'M' || r == 'L' }) {
		x, y, ok := strings.Cut(cmd, ",")
		fx, err1 := strconv.ParseFloat(x, 64)
		fy, err2 := strconv.ParseFloat(y, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("path data %q: cannot read %q", d, cmd)
		}
		out = append(out, [2]float64{fx, fy})
	}
	return out
}

// TestChartSVG checks what a report relies on: a self-contained, well-formed
// SVG, each line drawn once per unbroken run (NaN makes a gap), a step line
// made of horizontal and vertical moves, dashes kept, every named line in
// the legend with its colour, and text escaped.
func TestChartSVG(t *testing.T) {
	t.Parallel()
	x := []float64{0, 1, 2, 3, 4, 5}
	c := Chart{
		Title: "limit <vs> capacity & more", XLabel: "time (s)", YLabel: "requests",
		Lines: []Line{
			{Name: "capacity", X: x, Y: []float64{40, 40, 20, 20, 40, 40}, Color: "#000", Step: true, Dash: []float64{4, 2}},
			{Name: "limit", X: x, Y: []float64{20, 30, math.NaN(), 21, 35, 39}, Color: "#1f77b4"},
			{X: x, Y: []float64{1, 2, 3, 4, 5, 6}, Color: "#d62728"}, // no legend entry
		},
	}
	s := c.SVG()
	doc := parse(t, s)
	if strings.Contains(s, "<?xml") || strings.Contains(s, "<script") || strings.Contains(s, "<image") {
		t.Error("document has an XML declaration, a script or an image")
	}
	if !slices.Contains(doc.texts, "limit <vs> capacity & more") || !strings.Contains(s, "limit &lt;vs&gt; capacity &amp; more") {
		t.Error("title missing or not escaped")
	}
	for _, want := range []string{"capacity", "limit", "time (s)", "requests"} {
		if !slices.Contains(doc.texts, want) {
			t.Errorf("no text %q in %q", want, doc.texts)
		}
	}
	// Fonts are named with fallbacks of the same metrics, then any sans.
	if n := strings.Count(s, "font-family:"); n == 0 || n != strings.Count(s, "font-family:Liberation Sans,Arial,Helvetica,sans-serif;") {
		t.Error("text without the font fallbacks")
	}
	if n := len(doc.texts); n < 6 {
		t.Errorf("only %d texts: no tick labels?", n)
	}

	// capacity: one data path and one legend thumbnail, dashed; its data
	// path only moves horizontally or vertically.
	capy := doc.stroked("#000000")
	if len(capy) != 2 {
		t.Fatalf("capacity drawn %d times, want its line and its legend thumbnail", len(capy))
	}
	for _, p := range capy {
		if !strings.Contains(p.style, "stroke-dasharray:") {
			t.Errorf("capacity path not dashed: %s", p.style)
		}
	}
	data := slices.MaxFunc(capy, func(a, b svgPath) int { return len(a.d) - len(b.d) })
	pts := points(t, data.d)
	if len(pts) != 2*6-1 {
		t.Errorf("step line of 6 points has %d vertices, want 11", len(pts))
	}
	for i := 1; i < len(pts); i++ {
		if pts[i][0] != pts[i-1][0] && pts[i][1] != pts[i-1][1] {
			t.Fatalf("step line moves diagonally from %v to %v", pts[i-1], pts[i])
		}
	}
	// limit: the NaN splits it in two paths, plus the legend thumbnail.
	if n := len(doc.stroked("#1f77b4")); n != 3 {
		t.Errorf("limit drawn %d times, want 2 runs and a legend thumbnail", n)
	}
	// The unnamed line has no legend entry.
	if n := len(doc.stroked("#d62728")); n != 1 {
		t.Errorf("unnamed line drawn %d times, want once", n)
	}
	if os.Getenv("CHART_OUT") != "" {
		_ = os.WriteFile(filepath.Join(os.Getenv("CHART_OUT"), "chart.svg"), []byte(s), 0o644)
	}
}

// TestGridAndLog checks a grid of panels under one title, logarithmic axes
// with their decade labels, and charts without data.
func TestGridAndLog(t *testing.T) {
	t.Parallel()
	var charts []Chart
	for i := range 4 {
		charts = append(charts, Chart{Title: "panel " + strconv.Itoa(i), LogY: i%2 == 0, Lines: []Line{
			{Name: "a", X: []float64{0, 10, 20}, Y: []float64{0.5, 50, 5000}, Color: "#2ca02c"},
			{Name: "empty"},
		}})
	}
	doc := parse(t, Grid("four <panels>", 2, charts))
	for _, want := range []string{"four <panels>", "panel 0", "panel 1", "panel 2", "panel 3", "0.1", "1", "10", "100", "1000", "10k"} {
		if !slices.Contains(doc.texts, want) {
			t.Errorf("grid lacks text %q: %q", want, doc.texts)
		}
	}
	if n := len(doc.stroked("#2ca02c")); n != 8 {
		t.Errorf("line a drawn %d times, want once and a legend thumbnail in each of 4 panels", n)
	}
	// A title too long for the width is set smaller, not cut.
	long := strings.Repeat("a long title ", 20)
	doc = parse(t, Grid(long, 2, charts))
	i := slices.Index(doc.texts, long)
	if i < 0 || !strings.Contains(doc.textStyles[i], "font-size:") || strings.Contains(doc.textStyles[i], "font-size:10.5px") {
		t.Errorf("long title %q not shrunk: %q", long, doc.textStyles[max(i, 0)])
	}
	// No data, linear or logarithmic: still a valid document.
	parse(t, (&Chart{}).SVG())
	parse(t, (&Chart{LogY: true, Lines: []Line{{Name: "zeros", X: []float64{0, 1}, Y: []float64{0, 0}}}}).SVG())
}

func TestTicks(t *testing.T) {
	t.Parallel()
	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (logTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	if got, want := labels(0.1, 10), []string{"0.1", "0.2", "0.5", "1", "2", "5", "10"}; !slices.Equal(got, want) {
		t.Errorf("log labels over 0.1..10: %q, want %q", got, want)
	}
	if got, want := labels(1, 1e5), []string{"1", "10", "100", "1000", "10k", "100k"}; !slices.Equal(got, want) {
		t.Errorf("log labels over 1..1e5: %q, want %q", got, want)
	}
	for v, w := range map[float64]string{0: "0", 2.5: "2.5", 12000: "12k", 3e6: "3M", 0.05: "0.05"} {
		if g := num(v); g != w {
			t.Errorf("num(%v) = %q, want %q", v, g, w)
		}
	}
	for v, w := range map[float64]float64{97: 100, 40: 50, 21: 25, 0: 1, 1.1: 2} {
		if g := NiceCeil(v); g != w {
			t.Errorf("NiceCeil(%v) = %v, want %v", v, g, w)
		}
	}
}

func TestBadColourPanics(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Error("colour \"red\" accepted")
		}
	}()
	(&Chart{Lines: []Line{{X: []float64{0}, Y: []float64{1}, Color: "red"}}}).SVG()
}
