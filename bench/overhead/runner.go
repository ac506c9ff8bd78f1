package overhead

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/load"
)

// runner owns the processes of one Run: the upstream, Sluice and, when
// asked for, nginx.
type runner struct {
	opt      Options
	logf     func(string, ...any)
	upstream *proc
	sluice   *proc
	nginx    *proc
}

func (r *runner) stopAll() {
	for _, p := range []*proc{r.nginx, r.sluice, r.upstream} {
		if p != nil {
			p.stop()
		}
	}
}

// startUpstream runs `sluice-bench sim` with unlimited capacity, never
// refusing, and tokens without delay (unless a request asks for one with
// x-sim-itl).
func (r *runner) startUpstream() error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	r.upstream, err = start("upstream", addr, false, r.opt.Bench, "sim", "-listen", addr,
		"-capacity", "1000000", "-overload", "-1", "-base-ttft", "0", "-prefill-rate", "0",
		"-jitter", "0", "-itl", "0", "-itl-load", "0", "-max-output", "100000")
	return err
}

// sluiceConfig is the proxy's config: one provider, a limit that never
// binds (gradient2 with min = ceiling, so the controller does all its work
// but the limit stays at 20,000), no admin listener, no tracing.
const sluiceConfig = `listen: %s
admin: {listen: "off"}
shutdown: {grace: 0s}
tracing: {exporter: none}
providers:
  - name: up
    upstream: http://%s
    match: {path_prefix: /up}
    timeouts: {first_token: 1h, idle: 1h, total: 24h}
    limit: {algorithm: gradient2, ceiling: 20000, min: 20000, initial: 20000}
    queue: {max_waiting: 1000, max_wait: 10s}
`

func (r *runner) startSluice() error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	path := filepath.Join(r.opt.Dir, "sluice.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, sluiceConfig, addr, r.upstream.addr), 0o644); err != nil {
		return err
	}
	r.sluice, err = start("sluice", addr, false, r.opt.Sluice, "serve", "-config", path, "-log-level", "warn")
	return err
}

// nginxConfig is nginx as a plain streaming reverse proxy: as many workers
// as CPUs (as Sluice uses), upstream keep-alive, no buffering (as Sluice),
// no access log.
const nginxConfig = `worker_processes auto;
worker_rlimit_nofile 200000;
daemon off;
master_process on;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 50000; multi_accept on; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream up { server %[2]s; keepalive 1024; }
  server {
    listen %[3]s;
    location /up/ {
      proxy_pass http://up/;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 1h;
    }
  }
}
`

func (r *runner) startNginx() error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	path := filepath.Join(r.opt.Dir, "nginx.conf")
	if err := os.WriteFile(path, fmt.Appendf(nil, nginxConfig, r.opt.Dir, r.upstream.addr, addr), 0o644); err != nil {
		return err
	}
	r.nginx, err = start("nginx", addr, true, r.opt.Nginx, "-p", r.opt.Dir, "-c", path)
	return err
}

// target returns the process and URL for a target name.
func (r *runner) target(t string) (*proc, string) {
	switch t {
	case "sluice":
		return r.sluice, "http://" + r.sluice.addr + "/up/v1/chat/completions"
	case "nginx":
		return r.nginx, "http://" + r.nginx.addr + "/up/v1/chat/completions"
	}
	return nil, "http://" + r.upstream.addr + "/v1/chat/completions"
}

// measure runs c closed-loop clients without think time against target
// for d and reads the processes' CPU before and after.
func (r *runner) measure(ctx context.Context, mode string, c int, target string, d time.Duration) (Measurement, error) {
	p, url := r.target(target)
	m := Measurement{Mode: mode, Concurrency: c, Target: target}
	cpu := func() (px, up time.Duration, err error) {
		if p != nil {
			if px, err = p.cpu(); err != nil {
				return
			}
		}
		up, err = r.upstream.cpu()
		return
	}
	px0, up0, err := cpu()
	if err != nil {
		return m, err
	}
	res, err := load.Run(ctx, load.Config{
		URL: url, Stream: mode == "sse", SimHeaders: true, Clients: c, Duration: d,
		Prompt: load.Dist{Mean: 50}, Output: load.Dist{Mean: float64(r.opt.Tokens)}, Seed: 1,
	})
	if err != nil {
		return m, err
	}
	px1, up1, err := cpu()
	if err != nil {
		return m, err
	}
	s := res.Summary()
	m.OK, m.Failed = s.OK, s.Failed+s.RejectedSluice+s.RejectedUpstream
	m.RPS = float64(s.OK) / d.Seconds()
	m.TTFB, m.TTFT, m.Total = s.TTFB, s.TTFT, s.Total
	m.ProxyCPU, m.UpstreamCPU = px1-px0, up1-up0
	if p != nil {
		mem, err := p.memory()
		if err != nil {
			return m, err
		}
		m.ProxyRSS = mem.RSS
	}
	if m.OK == 0 {
		return m, fmt.Errorf("overhead: %s c=%d via %s: no request succeeded: %v", mode, c, target, s.Reasons)
	}
	if m.Failed > m.OK/100 {
		return m, fmt.Errorf("overhead: %s c=%d via %s: %d of %d requests failed: %v", mode, c, target, m.Failed, m.Failed+m.OK, s.Reasons)
	}
	return m, ctx.Err()
}

// streams restarts Sluice, opens n streams through it that send a token
// every 2 s, and reads Sluice's memory once all are open.
func (r *runner) streams(ctx context.Context, n int) (*StreamsResult, error) {
	r.sluice.stop()
	if err := r.startSluice(); err != nil {
		return nil, err
	}
	res := &StreamsResult{Requested: n}
	var err error
	// One request first, so the idle figure includes a warmed-up pool.
	if _, err := r.measure(ctx, "sse", 1, "sluice", 200*time.Millisecond); err != nil {
		return nil, err
	}
	if res.Idle, err = r.sluice.memory(); err != nil {
		return nil, err
	}
	var opened atomic.Int64
	all := make(chan struct{})
	_, url := r.target("sluice")
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := load.Run(runCtx, load.Config{
			URL: url, Stream: true, SimHeaders: true, Clients: n, Duration: 5 * time.Minute,
			Ramp:    time.Duration(n) * time.Second / 2000, // 2,000 new connections a second
			Headers: map[string]string{"x-sim-itl": "2s"},
			Prompt:  load.Dist{Mean: 50}, Output: load.Dist{Mean: 100000},
			OnFirstToken: func(time.Duration) {
				if opened.Add(1) == int64(n) {
					close(all)
				}
			},
		})
		done <- err
	}()
	select {
	case <-all:
	case <-time.After(90 * time.Second):
	case <-ctx.Done():
	}
	res.OpenIn = time.Since(start)
	res.Open = int(opened.Load())
	r.logf("streams: %d of %d open after %v", res.Open, n, res.OpenIn.Round(time.Millisecond))
	time.Sleep(2 * time.Second) // let every stream get a token through: buffers in use
	res.Loaded, err = r.sluice.memory()
	if err == nil {
		res.Upstream, err = r.upstream.memory()
	}
	cancel()
	if lerr := <-done; err == nil {
		err = lerr
	}
	if err != nil {
		return nil, err
	}
	if res.Open < n {
		return res, fmt.Errorf("overhead: only %d of %d streams opened within 90 s", res.Open, n)
	}
	return res, nil
}

// mib formats bytes as MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// us formats a duration in microseconds.
func us(d time.Duration) string {
	return strings.TrimSuffix(fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)), ".0")
}
