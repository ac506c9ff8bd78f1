package overhead

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(testutil.M(m),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
	)
}

// fakeProc writes a /proc tree holding the given PID -> (stat, status)
// files and returns it.
func fakeProc(t *testing.T, files map[int][2]string) procfs.FS {
	t.Helper()
	root := t.TempDir()
	for pid, f := range files {
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, name := range []string{"stat", "status"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(f[i]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestProcReading checks what the overhead runs take from /proc: CPU time
// from clock ticks, RSS and its high-water mark, and a process's children
// (nginx's workers).
func TestProcReading(t *testing.T) {
	t.Parallel()
	stat := func(pid, ppid, utime, stime int) string {
		// The command name may hold spaces and parentheses.
		// Fields 1-15 as below, then 16-52 as a real process has them.
		return fmt.Sprintf("%d (weird ) name) S %d %d %d 0 -1 4194560 100 0 0 0 %d %d ", pid, ppid, pid, pid, utime, stime) +
			"0 0 20 0 9 0 123 456789 1234 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
	}
	fs := fakeProc(t, map[int][2]string{
		4242: {stat(4242, 1, 150, 25), "Name:\tnginx\nVmPeak:\t  999 kB\nVmHWM:\t   2048 kB\nVmRSS:\t   1024 kB\nThreads:\t5\n"},
		4243: {stat(4243, 4242, 1, 1), "Name:\tnginx\n"},
		4244: {stat(4244, 4242, 1, 1), "Name:\tnginx\n"},
		4245: {stat(4245, 1, 1, 1), "Name:\tother\n"},
	})
	d, err := cpuTime(fs, 4242)
	if err != nil {
		t.Fatal(err)
	}
	if d != 1750*time.Millisecond {
		t.Errorf("cpu %v, want 1.75s (150+25 ticks)", d)
	}
	m, err := readMemory(fs, 4242)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 1<<20 || m.Peak != 2<<20 {
		t.Errorf("memory %+v, want RSS 1 MiB and peak 2 MiB", m)
	}
	if _, err := readMemory(fs, 4243); err == nil {
		t.Error("status without VmRSS accepted")
	}
	if _, err := cpuTime(fs, 9999); err == nil {
		t.Error("missing process accepted")
	}
	kids := children(fs, 4242)
	slices.Sort(kids)
	if !slices.Equal(kids, []int{4243, 4244}) {
		t.Errorf("children of 4242: %v, want [4243 4244]", kids)
	}
}

func TestOwnProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cpuTime(fs, os.Getpid()); err != nil {
		t.Fatal(err)
	}
	m, err := readMemory(fs, os.Getpid())
	if err != nil || m.RSS <= 0 || m.Peak < m.RSS {
		t.Fatalf("memory %+v, %v", m, err)
	}
}

// TestOverheadEndToEnd runs a tiny
// overhead measurement with separate processes. It checks the machinery
// (every row measured, the memory run opened its streams, the report
// renders), not the numbers.
func TestOverheadEndToEnd(t *testing.T) {
	if testing.Short() || runtime.GOOS != "linux" {
		t.Skip("builds binaries and starts processes")
	}
	testutil.Process(t)
	cases := []Case{
		{Name: "json", Clients: 2, Tokens: 4},
		{Name: "sse", Stream: true, Clients: 2, Tokens: 4, ITL: time.Millisecond},
		{Name: "anthropic", Stream: true, Anthropic: true, Clients: 2, Tokens: 4},
	}
	rep, err := Run(context.Background(), Options{
		Sluice: testutil.Binary(t, "sluice"), Bench: testutil.Binary(t, "sluice-bench"), Gradient2: true, OneProc: true,
		Cases: cases, Rounds: 2, Duration: 300 * time.Millisecond, Streams: 50,
	})
	if err != nil {
		t.Fatal(err)
	}
	// 2 rounds x 3 cases x (direct, sluice, sluice-g2, sluice-p1).
	if len(rep.Runs) != 24 || len(rep.Load) != 2 {
		t.Fatalf("want 24 measurements and 2 load readings, got %d and %d", len(rep.Runs), len(rep.Load))
	}
	for _, m := range rep.Runs {
		if m.OK == 0 || m.Failed != 0 || m.Total.P50 <= 0 {
			t.Errorf("measurement %+v", m)
		}
		if m.Case != "json" && m.TTFT.N != m.OK {
			t.Errorf("stream measurement without first tokens: %+v", m)
		}
		if (m.Target == Direct) != (m.ProxyCPU == 0 && m.ProxyRSS == 0) {
			t.Errorf("proxy figures of %s: %+v", m.Target, m)
		}
	}
	if c := rep.Median("sse", Sluice); c.N != 2 || c.RPS <= 0 || c.P50 <= 0 {
		t.Errorf("median of sse via sluice: %+v", c)
	}
	for _, tg := range []string{Sluice, SluiceG2} {
		if s := rep.Streams[tg]; s == nil || s.Open != 50 || s.Loaded.RSS <= 0 || s.Procs != 1 {
			t.Fatalf("streams run of %s: %+v", tg, s)
		}
	}
	md := rep.Markdown()
	for _, want := range []string{"## Summary", "## sse: OpenAI SSE streams of 4 tokens, 1ms between tokens, 2 concurrent",
		"## anthropic: Anthropic", "Sluice (gradient2) with 50 open streams", "| Sluice (fixed, GOMAXPROCS=1) |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if _, err := WriteReport(t.TempDir(), rep); err != nil {
		t.Fatal(err)
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3,1,2 = %v", got)
	}
	if got := median([]time.Duration{4, 1, 3, 2}); got != 2 {
		t.Errorf("median of 4,1,3,2 = %v (integer mean of 2 and 3)", got)
	}
}
