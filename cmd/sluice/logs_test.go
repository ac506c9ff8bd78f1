package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer collects a child's output; safe to read while it writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startConfig runs `sluice serve` on cfg (a YAML text; LISTEN stands for a
// free address it also returns) with extra arguments and environment, and
// waits until the proxy listener accepts.
func startConfig(t *testing.T, cfg string, env []string, args ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	addr := freeAddr(t)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(cfg, "LISTEN", addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sluiceBin, append([]string{"serve", "-config", path}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	waitListening(t, addr, logs)
	return cmd, addr, logs
}

func waitListening(t *testing.T, addr string, logs fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp4", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listening on %s: %s", addr, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rawRequest writes req on a new connection to addr and returns the first
// line of the answer.
func rawRequest(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// garbageUpstream answers every connection with bytes that are not HTTP.
func garbageUpstream(t *testing.T, garbage string) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte(garbage))
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// Secrets and content never reach the logs, at any level: a client's
// Authorization in a malformed request (proxy and admin listener), the
// bytes of an upstream's unparseable answer, and a key pasted into
// api_key_env by mistake in `sluice validate`.
func TestNoSecretsInLogs(t *testing.T) {
	t.Parallel()
	const secret = "TOPSECRET"
	t.Run("serve", func(t *testing.T) {
		t.Parallel()
		up := garbageUpstream(t, "GARBAGE "+secret+"-upstream\r\nX: "+secret+"\r\n\r\n")
		adminAddr := freeAddr(t)
		cmd, addr, logs := startConfig(t, fmt.Sprintf(`listen: LISTEN
admin: { listen: %s }
providers:
  - name: fake
    upstream: %s
    match: { path_prefix: /fake }
`, adminAddr, up), nil, "-log-level", "debug")
		waitListening(t, adminAddr, logs)
		for _, target := range []string{addr, adminAddr} {
			for _, req := range []string{
				"GET /fake/v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-" + secret + "-1\r\nBad Header\r\n\r\n",
				"POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-" + secret + "-2\r\nContent-Length: x\r\n\r\n",
				"GARBAGE sk-" + secret + "-3\r\n\r\n",
			} {
				if got := rawRequest(t, target, req); !strings.HasPrefix(got, "HTTP/1.1 400") {
					t.Errorf("malformed request to %s: %q, want 400", target, got)
				}
			}
		}
		resp, err := http.Post("http://"+addr+"/fake/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("garbage upstream: status %d, want 502", resp.StatusCode)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		waitExit(t, cmd, 10*time.Second)
		out := logs.String()
		for _, want := range []string{`"msg":"upstream request failed"`, `error when serving connection \"` + addr, `error when serving connection \"` + adminAddr} {
			if !strings.Contains(out, want) {
				t.Errorf("logs lack %s: the path was not exercised\n%s", want, out)
			}
		}
		assertNoSecret(t, out, secret)
	})
	t.Run("validate", func(t *testing.T) {
		t.Parallel()
		// A Groq-style key: letters, digits and _, a valid variable name.
		pasted := "gsk_" + secret + "q8Xw2Lm4Np6Rt8Vz0Bc3Df5Gh7Jk9"
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		cfg := "providers:\n  - name: a\n    upstream: https://api.example.com\n    match: { path_prefix: /a }\n    api_key_env: " + pasted + "\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sluiceBin, "validate", "-config", path).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Fatalf("validate: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "sluice.yaml:5: providers[0].api_key_env: ") {
			t.Errorf("validate does not report api_key_env:\n%s", out)
		}
		assertNoSecret(t, string(out), secret)
	})
}

func assertNoSecret(t *testing.T, out, secret string) {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, secret) {
			t.Errorf("secret in output: %s", line)
		}
	}
}
