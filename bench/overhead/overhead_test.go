package overhead

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	)
}

func TestParseStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	stat := "4242 (weird ) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 9 0 123 456 789"
	d, err := parseStat([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if d != 1750*time.Millisecond {
		t.Fatalf("cpu %v, want 1.75s (150+25 ticks)", d)
	}
	if _, err := parseStat([]byte("4242 (x) S 1 2")); err == nil {
		t.Error("short stat accepted")
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\tsluice\nVmPeak:\t  999 kB\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\nThreads:\t5\n"
	m, err := parseStatus([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 1<<20 || m.Peak != 2<<20 {
		t.Fatalf("got %+v", m)
	}
	if _, err := parseStatus([]byte("Name:\tx\n")); err == nil {
		t.Error("status without VmRSS accepted")
	}
}

func TestOwnProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	if _, err := cpuTime(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	m, err := readMemory(os.Getpid())
	if err != nil || m.RSS <= 0 || m.Peak < m.RSS {
		t.Fatalf("memory %+v, %v", m, err)
	}
}

// TestOverheadEndToEnd builds sluice and sluice-bench and runs a tiny
// overhead measurement with separate processes. It checks the machinery
// (every row measured, the memory run opened its streams, the report
// renders), not the numbers.
func TestOverheadEndToEnd(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("builds binaries and starts processes")
	}
	dir := t.TempDir()
	for _, b := range []string{"sluice", "sluice-bench"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b), "github.com/sluicehq/sluice/cmd/"+b)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b, err, out)
		}
	}
	rep, err := Run(context.Background(), Options{
		Sluice: filepath.Join(dir, "sluice"), Bench: filepath.Join(dir, "sluice-bench"),
		Concurrency: []int{2}, Duration: 300 * time.Millisecond, Tokens: 4, Streams: 50,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 4 {
		t.Fatalf("want 4 rows (json/sse x direct/sluice), got %d", len(rep.Runs))
	}
	for _, m := range rep.Runs {
		if m.OK == 0 || m.Failed != 0 || m.Total.P50 <= 0 {
			t.Errorf("row %+v", m)
		}
		if m.Mode == "sse" && m.TTFT.N != m.OK {
			t.Errorf("sse row without first tokens: %+v", m)
		}
	}
	if _, ok := rep.AddedLatency("sse", 2, "sluice"); !ok {
		t.Error("no added latency for sse")
	}
	if s := rep.Streams; s == nil || s.Open != 50 || s.Loaded.RSS <= 0 {
		t.Fatalf("streams run %+v", rep.Streams)
	}
	md := rep.Markdown()
	for _, want := range []string{"## Non-streaming JSON", "## SSE streams", "Sluice with 50 open streams"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if _, err := WriteReport(dir, rep); err != nil {
		t.Fatal(err)
	}
}
