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

	"github.com/sluicehq/sluice/bench/scenario"
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
		checkAccount(t, v.Variant.Label, accountOf(v))
	}
	for _, want := range []string{"Where the clients' requests went", "requests sent", "refused by Sluice", "calls given up"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
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

// The closing comparison states each measure as measured, better or worse.
func TestComparisonWording(t *testing.T) {
	vr := func(label string, ok int, tps float64, refused uint64, p99 time.Duration) *scenario.VariantResult {
		v := &scenario.VariantResult{Variant: scenario.Variant{Label: label}, UpstreamRejected: refused}
		v.Summary.OK, v.Summary.TokensPerSecond, v.ProviderTTFT.P99 = ok, tps, p99
		return v
	}
	f := vr("fixed @ 50", 380, 760, 6500, 10*time.Second)
	for _, c := range []struct {
		g    *scenario.VariantResult
		want []string
	}{
		{vr("gradient2", 376, 765, 8, 5*time.Second), []string{
			"completed 99% as many streams (376 vs 380 with fixed @ 50)",
			"delivered 1% more output tokens per second (765 vs 760)",
			"812x fewer refusals from the provider (8 vs 6500)",
			"provider TTFT p99 was lower: 5.0s vs 10s",
		}},
		{vr("gradient2", 325, 675, 0, 11*time.Second), []string{
			"completed 86% as many streams (325 vs 380",
			"delivered 89% as many output tokens per second (675 vs 760)",
			"The provider refused nothing with gradient2; fixed @ 50 drew 6500 refusals.",
			"provider TTFT p99 was not lower: 11s vs 10s",
		}},
	} {
		text := strings.Join(comparison(c.g, f), "\n")
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("comparison lacks %q:\n%s", w, text)
			}
		}
	}
}

func TestDurationBounds(t *testing.T) {
	for _, d := range []time.Duration{time.Second, time.Hour} {
		if _, err := Run(context.Background(), Options{Duration: d}, &bytes.Buffer{}); err == nil {
			t.Errorf("duration %v accepted", d)
		}
	}
}

// checkAccount fails unless every request sent is counted in exactly one
// way it ended, and Sluice's refusals by reason add up to its refusals.
func checkAccount(t *testing.T, name string, a account) {
	t.Helper()
	if sum := a.completed + a.refusedProvider + a.refusedSluice + a.failed + a.cut; sum != a.sent || a.sent == 0 {
		t.Errorf("%s: %d requests sent, %d accounted for: %+v", name, a.sent, sum, a)
	}
	by := 0
	for _, rc := range a.bySluice {
		by += rc.n
	}
	if by != a.refusedSluice {
		t.Errorf("%s: Sluice refused %d, %d by reason: %+v", name, a.refusedSluice, by, a.bySluice)
	}
	if a.retriedBySluice+a.refusedProvider < a.providerRefusals {
		t.Errorf("%s: the provider refused %d, %d passed on and %d retried", name, a.providerRefusals, a.refusedProvider, a.retriedBySluice)
	}
}

// TestAccountsAddUp: the account of a run's records counts every request
// once, and the printed rows are its numbers.
func TestAccountsAddUp(t *testing.T) {
	t.Parallel()
	v := &scenario.VariantResult{Variant: scenario.Variant{Label: "gradient2"}, UpstreamRejected: 9}
	v.Summary.Requests, v.Summary.Cut = 100, 5
	v.Summary.OK, v.Summary.RejectedUpstream, v.Summary.RejectedSluice, v.Summary.Failed = 70, 4, 24, 2
	v.Summary.Rejected = map[string]int{"queue_timeout": 20, "queue_full": 4}
	a := accountOf(v)
	checkAccount(t, "synthetic", a)
	if a.sent != 105 || a.retriedBySluice != 5 {
		t.Fatalf("account %+v: want 105 sent, 5 provider refusals retried by Sluice", a)
	}
	var out bytes.Buffer
	row := func(name, x, y string) { out.WriteString(name + "|" + x + "|" + y + "\n") }
	printAccounts(&out, row, v, v)
	for _, want := range []string{"requests sent|105|105", "  completed|70|70", "    queue_full|4|4", "    queue_timeout|20|20", "  still running at the end|5|5", "provider 429/529s Sluice retried|5|5"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("accounts lack %q:\n%s", want, out.String())
		}
	}
}
