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

// proc is a running `sluice serve`.
type proc struct {
	cmd  *exec.Cmd
	addr string // the proxy listener
	path string // the config file
	logs *lockedBuffer
}

// startConfig runs `sluice serve` on cfg (a YAML text; LISTEN stands for a
// free address it picks) with extra arguments and environment, and waits
// until the proxy listener accepts.
func startConfig(t *testing.T, cfg string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{addr: freeAddr(t), path: filepath.Join(t.TempDir(), "sluice.yaml"), logs: &lockedBuffer{}}
	if err := os.WriteFile(p.path, []byte(strings.ReplaceAll(cfg, "LISTEN", p.addr)), 0o600); err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(sluiceBin(t), append([]string{"serve", "-config", p.path}, args...)...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _, _ = p.cmd.Process.Wait() })
	waitListening(t, p.addr, p.logs)
	return p
}

// waitLog waits until the logs hold want.
func (p *proc) waitLog(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(p.logs.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("logs never said %q:\n%s", want, p.logs)
		}
	}
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
// Authorization in a malformed request (proxy listener) and the admin
// token in one (admin listener), the bytes of an upstream's unparseable
// answer, and a key pasted into api_key_env by mistake in `sluice
// validate`.
func TestNoSecretsInLogs(t *testing.T) {
	t.Parallel()
	const secret = "TOPSECRET"
	t.Run("serve", func(t *testing.T) {
		t.Parallel()
		up := garbageUpstream(t, "GARBAGE "+secret+"-upstream\r\nX: "+secret+"\r\n\r\n")
		adminAddr := freeAddr(t)
		adminToken := "adm-" + secret + "-0123456789"
		p := startConfig(t, fmt.Sprintf(`listen: LISTEN
admin: { listen: %s, token_env: SLUICE_TEST_ADMIN_TOKEN }
providers:
  - name: fake
    upstream: %s
    match: { path_prefix: /fake }
`, adminAddr, up), []string{"SLUICE_TEST_ADMIN_TOKEN=" + adminToken}, "-log-level", "debug")
		cmd, addr, logs := p.cmd, p.addr, p.logs
		waitListening(t, adminAddr, logs)
		for target, cred := range map[string]string{addr: "sk-" + secret + "-client", adminAddr: adminToken} {
			for _, req := range []string{
				"GET /fake/v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + cred + "\r\nBad Header\r\n\r\n",
				"POST /fake/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + cred + "\r\nContent-Length: x\r\n\r\n",
				"GARBAGE " + cred + "\r\n\r\n",
			} {
				if got := rawRequest(t, target, req); !strings.HasPrefix(got, "HTTP/1.1 400") {
					t.Errorf("malformed request to %s: %q, want 400", target, got)
				}
			}
		}
		for _, c := range []struct {
			auth string
			want string
		}{{"Bearer " + adminToken, "HTTP/1.1 200"}, {"Bearer " + adminToken + "x", "HTTP/1.1 401"}} {
			req := "GET /admin/status HTTP/1.1\r\nHost: x\r\nAuthorization: " + c.auth + "\r\nConnection: close\r\n\r\n"
			if got := rawRequest(t, adminAddr, req); !strings.HasPrefix(got, c.want) {
				t.Errorf("admin status: %q, want %s", got, c.want)
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
		out, err := exec.Command(sluiceBin(t), "validate", "-config", path).CombinedOutput()
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
