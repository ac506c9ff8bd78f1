package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.M(m).Run()) }

// sluiceBin is the sluice binary a test starts (testutil.Binary): make's
// build, or one built once for this test process. A test that starts it
// is a process-level test.
func sluiceBin(t *testing.T) string {
	t.Helper()
	testutil.Process(t)
	return testutil.Binary(t, "sluice")
}

// sseUpstream streams n events, gap apart.
func sseUpstream(t *testing.T, n int, gap time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i := 0; i < n; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			f.Flush()
			select {
			case <-time.After(gap):
			case <-r.Context().Done():
				return
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	})}
	go srv.Serve(ln) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServe runs `sluice serve` on a generated config and waits until it
// accepts connections.
func startServe(t *testing.T, upstream, grace string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	addr := freeAddr(t)
	cfg := fmt.Sprintf(`listen: %s
admin: { listen: "off" }
shutdown: { grace: %s }
providers:
  - name: fake
    upstream: %s
    match: { path_prefix: /fake }
    limit: { algorithm: fixed, ceiling: 4 }
`, addr, grace, upstream)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sluiceBin(t), "serve", "-config", path)
	logs := &strings.Builder{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp4", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice did not start: %s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, "http://" + addr, logs
}

func openStream(t *testing.T, base string) (*http.Response, *bufio.Reader) {
	t.Helper()
	resp, err := http.Post(base+"/fake/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return resp, br
}

func waitExit(t *testing.T, cmd *exec.Cmd, within time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			return 0
		}
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		t.Fatal(err)
	case <-time.After(within):
		t.Fatalf("sluice did not exit within %v", within)
	}
	return -1
}

// SIGTERM lets a stream in flight finish within the grace period, refuses new
// connections, and exits 0.
func TestSigtermLetsStreamsFinish(t *testing.T) {
	up := sseUpstream(t, 8, 100*time.Millisecond)
	cmd, base, logs := startServe(t, up, "10s")
	resp, br := openStream(t, base)
	defer resp.Body.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream during shutdown: err %v, body %q", err, rest)
	}
	if code := waitExit(t, cmd, 5*time.Second); code != 0 {
		t.Fatalf("exit code %d; logs:\n%s", code, logs)
	}
	if _, err := net.DialTimeout("tcp4", strings.TrimPrefix(base, "http://"), time.Second); err == nil {
		t.Fatal("still accepting connections after shutdown")
	}
}

// When the grace period ends, streams still open are cut (clients see a
// truncated body) and the process exits 0.
func TestSigtermCutsStreamsAfterGrace(t *testing.T) {
	up := sseUpstream(t, 1000, 50*time.Millisecond)
	cmd, base, logs := startServe(t, up, "300ms")
	resp, br := openStream(t, base)
	defer resp.Body.Close()
	t0 := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(br)
	if err == nil || strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream was not cut: err %v", err)
	}
	if d := time.Since(t0); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("stream cut %v after SIGTERM, grace 300ms", d)
	}
	if code := waitExit(t, cmd, 10*time.Second); code != 0 {
		t.Fatalf("exit code %d; logs:\n%s", code, logs)
	}
	if !strings.Contains(logs.String(), "grace period over") {
		t.Fatalf("no cut logged:\n%s", logs)
	}
}

func TestValidateListsEveryError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte("listen: 127.0.0.1:8080\nproviders:\n  - name: a\n    upstream: ftp://x\n    match: { path_prefix: nope }\n    limit: { ceiling: 0 }\n"), 0o600)
	out, err := exec.Command(sluiceBin(t), "validate", "-config", path).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("validate exit: %v\n%s", err, out)
	}
	for _, want := range []string{"bad.yaml:4: providers[0].upstream", "bad.yaml:5: providers[0].match.path_prefix", "bad.yaml:6: providers[0].limit.ceiling"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
}
