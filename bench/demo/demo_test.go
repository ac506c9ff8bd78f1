package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	)
}

// TestDemoShort runs the demo for its minimum duration with few clients and
// short outputs: it must print a line per second, the comparison, and
// write a self-contained HTML report.
func TestDemoShort(t *testing.T) {
	var out bytes.Buffer
	report := filepath.Join(t.TempDir(), "r.html")
	s, err := Run(context.Background(), Options{Duration: 5 * time.Second, Clients: 16, OutputTokens: 8, Report: report}, &out)
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if n := strings.Count(text, "] "); n < 4 || n > 6 {
		t.Errorf("want about 5 live lines, got %d:\n%s", n, text)
	}
	for _, want := range []string{"capacity 40", "capacity 20", "completed streams", "provider 429/529s", "HTML report with charts: " + report} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if s.Report != report || len(s.Result.Variants) != 2 {
		t.Fatalf("summary %+v", s)
	}
	for _, v := range s.Result.Variants {
		if v.Summary.OK == 0 {
			t.Errorf("%s completed nothing", v.Variant.Label)
		}
	}
	h, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	html := string(h)
	if n := strings.Count(html, "<svg"); n != 4 {
		t.Errorf("report has %d inline charts, want 4", n)
	}
	// Self-contained: the only URLs are the SVG namespace declarations,
	// and nothing is loaded or linked.
	namespaces := strings.Count(html, `xmlns="http://www.w3.org/2000/svg"`) + strings.Count(html, `xmlns:xlink="http://www.w3.org/1999/xlink"`)
	if strings.Count(html, "http") != namespaces || strings.Contains(html, "src=") || strings.Contains(html, "href=") || strings.Contains(html, "url(") {
		t.Errorf("report refers to external resources")
	}
}

func TestDurationBounds(t *testing.T) {
	for _, d := range []time.Duration{time.Second, time.Hour} {
		if _, err := Run(context.Background(), Options{Duration: d}, &bytes.Buffer{}); err == nil {
			t.Errorf("duration %v accepted", d)
		}
	}
}
