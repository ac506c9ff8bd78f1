package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// freePort returns a loopback port nobody listens on right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// redisProc is a redis-server on loopback without persistence.
type redisProc struct {
	bin  string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(bin string, port int) (*redisProc, error) {
	if bin == "" {
		bin = "redis-server"
	}
	r := &redisProc{bin: bin, port: port}
	return r, r.start()
}

func (r *redisProc) start() error {
	r.cmd = exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--loglevel", "warning")
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w (install it: apt-get install redis-server)", err)
	}
	r.done = make(chan struct{})
	go func(c *exec.Cmd, d chan struct{}) { _ = c.Wait(); close(d) }(r.cmd, r.done)
	return waitTCP(r.port, r.done)
}

// stop kills redis-server: its state is gone.
func (r *redisProc) stop() {
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		<-r.done
		r.cmd = nil
	}
}

// waitTCP waits until something accepts on port, or exited closes.
func waitTCP(port int, exited <-chan struct{}) error {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			return fmt.Errorf("process for port %d exited", port)
		default:
		}
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("nothing listens on port %d", port)
}

// replicaProc is one `sluice serve` process.
type replicaProc struct {
	name        string
	port, admin int
	cmd         *exec.Cmd
	done        chan struct{}
	killed      bool
}

// replicaConfig is the YAML of one replica.
func replicaConfig(c *Config, name string, port, admin, simPort, redisPort int) string {
	return fmt.Sprintf(`listen: 127.0.0.1:%d
admin: { listen: 127.0.0.1:%d }
shutdown: { grace: 1s }
providers:
  - name: sim
    upstream: http://127.0.0.1:%d
    match: { path_prefix: /sim }
    timeouts: { first_token: 30s, idle: 30s, total: 5m }
    limit: { algorithm: %s, ceiling: %d, initial: %d, min: 1, cooldown: 1s, fleet: %s }
    queue: { max_waiting: 5000, max_wait: 2m }
%scluster:
  redis: 127.0.0.1:%d
  replica_id: %s
  heartbeat: %s
  lease_ttl: %s
  expected_replicas: %d
`, port, admin, simPort, c.Algorithm, c.Ceiling, c.Initial, c.Mode, rateBlock(c), redisPort, name, c.Heartbeat, c.LeaseTTL, len(c.Clients))
}

// rateBlock is the provider's rate: block ("" without RPM).
func rateBlock(c *Config) string {
	if c.RPM <= 0 {
		return ""
	}
	w := c.RequestWindow
	if w <= 0 {
		w = time.Minute
	}
	return fmt.Sprintf("    rate: { rpm: %d, request_window: %s }\n", c.RPM, w)
}

func startReplica(c *Config, dir, name string, simPort, redisPort int) (*replicaProc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(replicaConfig(c, name, port, admin, simPort, redisPort)), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	r := &replicaProc{name: name, port: port, admin: admin, done: make(chan struct{})}
	r.cmd = exec.Command(c.Sluice, "serve", "-config", path, "-log-level", "warn")
	r.cmd.Stdout, r.cmd.Stderr = logf, logf
	if err := r.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", c.Sluice, err)
	}
	go func() { _ = r.cmd.Wait(); logf.Close(); close(r.done) }()
	if err := waitTCP(admin, r.done); err != nil {
		return nil, fmt.Errorf("replica %s: %w (see %s)", name, err, logf.Name())
	}
	return r, nil
}

// kill sends SIGKILL: no shutdown, no release, no goodbye to the fleet.
func (r *replicaProc) kill() {
	r.killed = true
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
}

// stop ends the replica gracefully.
func (r *replicaProc) stop() {
	if r.killed {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.kill()
	}
}

// view is the part of a replica's /admin/status the runner reads.
type view struct {
	Providers []struct {
		Limit      int `json:"limit"`
		Inflight   int `json:"inflight"`
		Queued     int `json:"queued"`
		Components struct {
			Loss *float64 `json:"loss"`
		} `json:"components"`
		FrozenUntil *time.Time `json:"frozen_until"`
	} `json:"providers"`
	Cluster *struct {
		State            string `json:"state"`
		Replicas         int    `json:"replicas"`
		RateSyncs        uint64 `json:"rate_syncs"`
		RateSyncFailures uint64 `json:"rate_sync_failures"`
		Providers        []struct {
			Cap    int `json:"cap"`
			Share  int `json:"share"`
			Leases *struct {
				Held int `json:"held"`
			} `json:"leases"`
		} `json:"providers"`
	} `json:"cluster"`
}

var statusClient = &http.Client{Timeout: time.Second}

func (r *replicaProc) status(ctx context.Context) (*view, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(r.admin)+"/admin/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := statusClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v view
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, err
	}
	if len(v.Providers) == 0 || v.Cluster == nil || len(v.Cluster.Providers) == 0 {
		return nil, fmt.Errorf("replica %s: no provider or no cluster in /admin/status", r.name)
	}
	return &v, nil
}
