package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/testutil"
)

// A replica whose Redis is down at start serves anyway, degraded: each
// provider capped at ceiling / expected_replicas, and /admin/status and
// /metrics say so.
func TestServeStartsDegradedWithRedisDown(t *testing.T) {
	t.Parallel()
	up := sseUpstream(t, 3, time.Millisecond)
	addr, admin, dead := freeAddr(t), freeAddr(t), freeAddr(t) // nothing listens on dead
	cfg := fmt.Sprintf(`listen: %s
admin: { listen: %s }
providers:
  - name: fake
    upstream: %s
    match: { path_prefix: /fake }
    limit: { algorithm: fixed, ceiling: 12, fleet: strict }
    rate: { rpm: 600 }
cluster:
  redis: %s
  replica_id: t1
  heartbeat: 200ms
  lease_ttl: 1s
  expected_replicas: 3
`, addr, admin, up, dead)
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(sluiceBin(t), "validate", "-config", path).CombinedOutput(); err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	cmd := exec.Command(sluiceBin(t), "serve", "-config", path)
	logs := &strings.Builder{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp4", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice did not start: %s", logs)
		}
	}
	resp, err := http.Post("http://"+addr+"/fake/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("strict provider with Redis down: %d %q", resp.StatusCode, body)
	}
	var st struct {
		Providers []struct{ Limit int } `json:"providers"`
		Cluster   struct {
			State     string `json:"state"`
			Providers []struct {
				Cap    int `json:"cap"`
				Leases struct {
					Unconfirmed uint64 `json:"unconfirmed"`
				} `json:"leases"`
				Rate *struct {
					Mode string `json:"mode"`
				} `json:"rate"`
			} `json:"providers"`
		} `json:"cluster"`
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := http.Get("http://" + admin + "/admin/status")
		if err == nil {
			err = json.NewDecoder(r.Body).Decode(&st)
			r.Body.Close()
		}
		if err == nil && st.Cluster.State == "degraded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("state %q, want degraded (err %v)", st.Cluster.State, err)
		}
	}
	if st.Providers[0].Limit != 4 || st.Cluster.Providers[0].Cap != 4 {
		t.Errorf("limit %d cap %d with Redis down, want ceiling/expected_replicas = 4", st.Providers[0].Limit, st.Cluster.Providers[0].Cap)
	}
	// The fleet-wide rpm is local at 600 / expected_replicas; the request
	// above waited for the first of its refill (the bucket starts empty).
	if r := st.Cluster.Providers[0].Rate; r == nil || r.Mode != "local" {
		t.Errorf("rate status %+v with Redis down, want a fleet-wide rate, local", r)
	}
	if st.Cluster.Providers[0].Leases.Unconfirmed != 1 {
		t.Errorf("unconfirmed leases %d, want the one request served", st.Cluster.Providers[0].Leases.Unconfirmed)
	}
	r, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(m), `sluice_cluster_rate_leased{provider="fake"} 0`) {
		t.Errorf("/metrics does not say the rate is local:\n%s", grepLines(string(m), "sluice_cluster_rate"))
	}
	if !strings.Contains(string(m), "sluice_cluster_degraded 1") {
		t.Errorf("/metrics does not say degraded:\n%s", grepLines(string(m), "sluice_cluster_"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestRedisOptions(t *testing.T) {
	t.Parallel()
	o, err := redisOptions(config.Cluster{Redis: "rediss://u@redis.example:6380/2", Password: "pw", TLS: config.ClusterTLS{ServerName: "r.internal"}})
	if err != nil {
		t.Fatal(err)
	}
	if o.Addr != "redis.example:6380" || o.Username != "u" || o.Password != "pw" || o.DB != 2 || o.TLSConfig == nil || o.TLSConfig.ServerName != "r.internal" {
		t.Errorf("options from a rediss URL: addr %q user %q db %d tls %v", o.Addr, o.Username, o.DB, o.TLSConfig != nil)
	}
	o, err = redisOptions(config.Cluster{Redis: "10.0.0.5:6379"})
	if err != nil || o.Addr != "10.0.0.5:6379" || o.TLSConfig != nil {
		t.Errorf("options from host:port: %+v %v", o, err)
	}
	if id := replicaID(config.Cluster{}); !strings.HasSuffix(id, fmt.Sprintf("-%d", os.Getpid())) {
		t.Errorf("default replica id %q does not end in the pid", id)
	}
}

// A wrong Redis password is told apart from an outage: the log says the
// credentials were refused, /readyz answers 503 saying so (the replica
// never got through, so it stays out of the load balancer), and
// /admin/status has auth_failed.
func TestWrongRedisPasswordIsReported(t *testing.T) {
	t.Parallel()
	testutil.Process(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found: CI must install it (make test does, with apt-get)")
		}
		t.Skip("redis-server not found; `make test` installs Debian's package, or apt-get install redis-server")
	}
	raddr := freeAddr(t)
	host, port, _ := net.SplitHostPort(raddr)
	rs := exec.Command("redis-server", "--port", port, "--bind", host, "--save", "", "--appendonly", "no", "--requirepass", "right")
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Process.Kill(); _, _ = rs.Process.Wait() })
	up := sseUpstream(t, 3, time.Millisecond)
	admin := freeAddr(t)
	p := startConfig(t, fmt.Sprintf(`listen: LISTEN
admin: { listen: %s }
providers:
  - name: fake
    upstream: %s
    match: { path_prefix: /fake }
cluster:
  redis: %s
  password_env: SLUICE_TEST_REDIS_PASSWORD
  replica_id: t1
  heartbeat: 200ms
`, admin, up, raddr), []string{"SLUICE_TEST_REDIS_PASSWORD=wrong"})
	p.waitLog(t, "authentication failed")
	if strings.Contains(p.logs.String(), "Redis unreachable") {
		t.Errorf("a wrong password logged as unreachable:\n%s", p.logs)
	}
	r, err := http.Get("http://" + admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != 503 || !strings.Contains(string(body), "credentials") {
		t.Errorf("/readyz with a wrong Redis password: %d %q, want 503 naming the credentials", r.StatusCode, body)
	}
	r, err = http.Get("http://" + admin + "/admin/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Cluster struct {
			AuthFailed bool `json:"auth_failed"`
		} `json:"cluster"`
	}
	err = json.NewDecoder(r.Body).Decode(&st)
	r.Body.Close()
	if err != nil || !st.Cluster.AuthFailed {
		t.Errorf("/admin/status cluster.auth_failed = %v (%v), want true", st.Cluster.AuthFailed, err)
	}
}
