package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// metric returns the value of an unlabelled metric scraped from admin.
func metric(t *testing.T, admin, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return ""
}

func waitMetric(t *testing.T, admin, name, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := metric(t, admin, name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %s, want %s", name, got, want)
		}
	}
}

// replaceFile writes data next to path and renames it over path, as
// editors do, so the watcher never reads it half-written.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Reverting a rejected file to the bytes in force sets
// sluice_config_reload_success back to 1: the file on disk is valid and in
// force again.
func TestReloadSuccessAfterRevert(t *testing.T) {
	t.Parallel()
	adminAddr := freeAddr(t)
	cfg := fmt.Sprintf(`listen: LISTEN
admin: { listen: %s }
providers:
  - name: fake
    upstream: http://127.0.0.1:1
    match: { path_prefix: /fake }
`, adminAddr)
	p := startConfig(t, cfg, nil)
	waitListening(t, adminAddr, p.logs)
	good, err := os.ReadFile(p.path)
	if err != nil {
		t.Fatal(err)
	}
	waitMetric(t, adminAddr, "sluice_config_reload_success", "1")
	replaceFile(t, p.path, strings.Replace(string(good), "match:", "limit: { ceiling: 0 }\n    match:", 1))
	waitMetric(t, adminAddr, "sluice_config_reload_success", "0")
	replaceFile(t, p.path, string(good))
	waitMetric(t, adminAddr, "sluice_config_reload_success", "1")
}

// A client that sends half a request to the admin listener and stalls
// does not hold the exit past shutdown.grace (the admin listener's read
// timeout is 10 s).
func TestHalfSentAdminRequestDoesNotDelayExit(t *testing.T) {
	t.Parallel()
	adminAddr := freeAddr(t)
	p := startConfig(t, fmt.Sprintf(`listen: LISTEN
admin: { listen: %s }
shutdown: { grace: 1s }
providers:
  - name: fake
    upstream: http://127.0.0.1:1
    match: { path_prefix: /fake }
`, adminAddr), nil)
	waitListening(t, adminAddr, p.logs)
	c, err := net.Dial("tcp4", adminAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	// A whole request on another connection: the listener is serving, so
	// the half-sent one has been accepted too.
	if got := rawRequest(t, adminAddr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("healthz: %q", got)
	}
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, p.cmd, 5*time.Second); code != 0 {
		t.Fatalf("exit code %d; logs:\n%s", code, p.logs)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("exited %v after SIGTERM with grace 1s", d)
	}
}

// A second SIGTERM during the graceful stop ends the process at once, exit
// status 1, without waiting for shutdown.grace; the open stream ends
// truncated.
func TestSecondSigtermForcesExit(t *testing.T) {
	t.Parallel()
	up := sseUpstream(t, 10000, 50*time.Millisecond)
	p := startConfig(t, `listen: LISTEN
admin: { listen: "off" }
shutdown: { grace: 1m }
providers:
  - name: fake
    upstream: `+up+`
    match: { path_prefix: /fake }
`, nil)
	resp, br := openStream(t, "http://"+p.addr)
	defer resp.Body.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, `"msg":"shutting down"`)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, p.cmd, 5*time.Second); code != 1 {
		t.Fatalf("exit code %d, want 1; logs:\n%s", code, p.logs)
	}
	if !strings.Contains(p.logs.String(), "second signal") {
		t.Errorf("forced exit not logged:\n%s", p.logs)
	}
	rest, err := io.ReadAll(br)
	if err == nil || strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream not cut: err %v", err)
	}
}
