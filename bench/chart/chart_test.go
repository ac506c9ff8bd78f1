package chart

import (
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wellFormed fails the test unless s parses as XML.
func wellFormed(t *testing.T, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, s)
		}
	}
}

func TestChartSVG(t *testing.T) {
	x := []float64{0, 1, 2, 3, 4, 5}
	c := Chart{
		Title: "limit <vs> capacity & more", XLabel: "time (s)", YLabel: "requests",
		Lines: []Line{
			{Name: "capacity", X: x, Y: []float64{40, 40, 20, 20, 40, 40}, Color: "black", Step: true, Dash: "4 2"},
			{Name: "limit", X: x, Y: []float64{20, 30, math.NaN(), 21, 35, 39}},
		},
	}
	s := c.SVG()
	wellFormed(t, s)
	if !strings.Contains(s, "limit &lt;vs&gt; capacity &amp; more") {
		t.Error("title not escaped")
	}
	// The NaN splits the second line into two sub-paths.
	var paths []string
	for _, part := range strings.Split(s, `<path d="`)[1:] {
		paths = append(paths, part[:strings.IndexByte(part, '"')])
	}
	if len(paths) != 2 {
		t.Fatalf("want 2 paths, got %d", len(paths))
	}
	if strings.Count(paths[1], "M") != 2 {
		t.Errorf("NaN should break the line: %s", paths[1])
	}
	if !strings.Contains(paths[0], "H") || !strings.Contains(paths[0], "V") {
		t.Errorf("step line should use H/V: %s", paths[0])
	}
	if os.Getenv("CHART_OUT") != "" {
		_ = os.WriteFile(filepath.Join(os.Getenv("CHART_OUT"), "chart.svg"), []byte(s), 0o644)
	}
}

func TestGridAndLog(t *testing.T) {
	var charts []Chart
	for i := range 4 {
		charts = append(charts, Chart{Title: "panel", LogY: i%2 == 0, Lines: []Line{
			{Name: "a", X: []float64{0, 10, 20}, Y: []float64{0.5, 50, 5000}},
			{Name: "empty"},
		}})
	}
	s := Grid("four panels", 2, charts)
	wellFormed(t, s)
	if n := strings.Count(s, "<clipPath"); n != 4 {
		t.Fatalf("want 4 panels, got %d", n)
	}
	// Empty chart: still valid.
	wellFormed(t, (&Chart{}).SVG())
}

func TestTicks(t *testing.T) {
	got := ticks(0, 97, 5)
	want := []float64{0, 20, 40, 60, 80, 100}
	if len(got) != len(want) {
		t.Fatalf("ticks(0, 97) = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ticks(0, 97) = %v", got)
		}
	}
	if lt := logTicks(1, 1e5); len(lt) != 6 {
		t.Fatalf("logTicks(1, 1e5) = %v", lt)
	}
	for v, w := range map[float64]string{0: "0", 2.5: "2.5", 12000: "12k", 3e6: "3M", 0.05: "0.05"} {
		if g := num(v); g != w {
			t.Errorf("num(%v) = %q, want %q", v, g, w)
		}
	}
}
