package overhead

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench/load"
)

// runner owns the processes of one Run: the upstream and a process per
// proxy target.
type runner struct {
	opt      Options
	logf     func(string, ...any)
	upstream *proc
	procs    map[string]*proc // by target; none for direct
	targets  []string         // in report order
}

func (r *runner) stopAll() {
	for _, p := range r.procs {
		p.stop()
	}
	if r.upstream != nil {
		r.upstream.stop()
	}
}

// startAll starts the upstream and every proxy asked for.
func (r *runner) startAll() error {
	if err := r.startUpstream(); err != nil {
		return err
	}
	r.targets = []string{Direct}
	type starter struct {
		target string
		on     bool
		start  func(string) (*proc, error)
	}
	for _, s := range []starter{
		{Nginx, r.opt.Nginx != "", r.startNginx},
		{HAProxy, r.opt.HAProxy != "", r.startHAProxy},
		{Sluice, true, r.startSluice},
		{SluiceG2, r.opt.Gradient2, r.startSluice},
		{SluiceP1, r.opt.OneProc, r.startSluice},
		{SluiceB, r.opt.CompareSluice != "", r.startSluice},
	} {
		if !s.on {
			continue
		}
		p, err := s.start(s.target)
		if err != nil {
			return err
		}
		r.procs[s.target] = p
		r.targets = append(r.targets, s.target)
	}
	return nil
}

// startUpstream runs `sluice-bench sim` with unlimited capacity, never
// refusing, and tokens without delay (unless a request asks for a delay
// with x-sim-itl).
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

// sluiceConfig is the proxy's config: one provider whose limit never binds
// (ceiling 10,000: fixed, or gradient2 with min = initial = ceiling, so the
// controller does all its work but the limit stays put), metrics on (they
// always are), no admin listener, no tracing. Anthropic requests go to the
// same provider (dialect auto: by path).
const sluiceConfig = `listen: %s
admin: {listen: "off"}
shutdown: {grace: 0s}
tracing: {exporter: none}
server: {max_connections: 30000}
providers:
  - name: up
    upstream: http://%s
    match: {path_prefix: /up}
    timeouts: {first_token: 1h, idle: 1h, total: 24h}
    limit: %s
    queue: {max_waiting: 1000, max_wait: 10s}
`

// sluiceLimit is the limit block of each Sluice target.
var sluiceLimit = map[string]string{
	Sluice:   "{algorithm: fixed, ceiling: 10000}",
	SluiceG2: "{algorithm: gradient2, ceiling: 10000, min: 10000, initial: 10000}",
	SluiceB:  "{algorithm: fixed, ceiling: 10000}",
	SluiceP1: "{algorithm: fixed, ceiling: 10000}",
}

func (r *runner) startSluice(target string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(r.opt.Dir, target+".yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, sluiceConfig, addr, r.upstream.addr, sluiceLimit[target]), 0o644); err != nil {
		return nil, err
	}
	bin := r.opt.Sluice
	if target == SluiceB {
		bin = r.opt.CompareSluice
	}
	var env []string
	if target == SluiceP1 {
		env = []string{"GOMAXPROCS=1"}
	}
	return startEnv(target, addr, false, env, bin, "serve", "-config", path, "-log-level", "warn")
}

// nginxConfig is nginx as a plain streaming reverse proxy: as many workers
// as CPUs (as Sluice uses), upstream keep-alive, no buffering (as Sluice),
// no access log.
const nginxConfig = `worker_processes auto;
worker_rlimit_nofile 20000;
daemon off;
master_process on;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 20000; multi_accept on; }
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

func (r *runner) startNginx(string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(r.opt.Dir, "nginx.conf")
	if err := os.WriteFile(path, fmt.Appendf(nil, nginxConfig, r.opt.Dir, r.upstream.addr, addr), 0o644); err != nil {
		return nil, err
	}
	return start("nginx", addr, true, r.opt.Nginx, "-p", r.opt.Dir, "-c", path)
}

// haproxyConfig is HAProxy as a plain reverse proxy in HTTP mode: one
// process with a thread per CPU (its default), keep-alive on both sides
// with idle upstream connections reused by any client, no logs, and
// http-no-delay: without it HAProxy holds small response data back to merge
// it with what follows, which delays a stream's first token to about its
// end.
const haproxyConfig = `global
  maxconn 9000
defaults
  mode http
  timeout connect 5s
  timeout client 1h
  timeout server 1h
  http-reuse always
  option http-no-delay
frontend fe
  bind %[2]s
  default_backend be
backend be
  http-request replace-path /up(/.*) \1
  server up %[1]s
`

func (r *runner) startHAProxy(string) (*proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(r.opt.Dir, "haproxy.cfg")
	if err := os.WriteFile(path, fmt.Appendf(nil, haproxyConfig, r.upstream.addr, addr), 0o644); err != nil {
		return nil, err
	}
	return start("haproxy", addr, true, r.opt.HAProxy, "-db", "-f", path)
}

// url returns the request URL of case c for target t.
func (r *runner) url(t string, c Case) string {
	path := "/v1/chat/completions"
	if c.Anthropic {
		path = "/v1/messages"
	}
	if p := r.procs[t]; p != nil {
		return "http://" + p.addr + "/up" + path
	}
	return "http://" + r.upstream.addr + path
}

// loadConfig is the load generator's config for case c against url.
func loadConfig(c Case, url string, d time.Duration) load.Config {
	lc := load.Config{
		URL: url, Stream: c.Stream, SimHeaders: true, Clients: c.Clients, Duration: d,
		Prompt: load.Dist{Mean: 50}, Output: load.Dist{Mean: float64(c.Tokens)}, Seed: 1,
	}
	if c.ITL > 0 {
		lc.Headers = map[string]string{"x-sim-itl": c.ITL.String()}
	}
	return lc
}

// warmUp sends a little of every case's kind of load through every target
// (connections, pools, page faults).
func (r *runner) warmUp(ctx context.Context) error {
	seen := map[string]bool{}
	for _, c := range r.opt.Cases {
		key := fmt.Sprint(c.Stream, c.Anthropic)
		if seen[key] {
			continue
		}
		seen[key] = true
		w := c
		w.Clients = 8
		for _, t := range r.targets {
			if _, err := r.measure(ctx, w, t, min(r.opt.Duration/4, time.Second)); err != nil {
				return err
			}
		}
	}
	return nil
}

// measure runs case c against target for d and reads the processes' CPU
// before and after.
func (r *runner) measure(ctx context.Context, c Case, target string, d time.Duration) (Measurement, error) {
	p := r.procs[target]
	m := Measurement{Case: c.Name, Target: target}
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
	res, err := load.Run(ctx, loadConfig(c, r.url(target, c), d))
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
	pc := func(p load.Percentiles) percentiles { return percentiles{N: p.N, P50: p.P50, P90: p.P90, P99: p.P99} }
	m.TTFB, m.TTFT, m.Total = pc(s.TTFB), pc(s.TTFT), pc(s.Total)
	m.ProxyCPU, m.UpstreamCPU = px1-px0, up1-up0
	if p != nil {
		mem, err := p.memory()
		if err != nil {
			return m, err
		}
		m.ProxyRSS = mem.RSS
	}
	if m.OK == 0 {
		return m, fmt.Errorf("overhead: %s via %s: no request succeeded: %v", c.Name, target, s.Reasons)
	}
	if m.Failed > m.OK/100 {
		return m, fmt.Errorf("overhead: %s via %s: %d of %d requests failed: %v", c.Name, target, m.Failed, m.Failed+m.OK, s.Reasons)
	}
	return m, ctx.Err()
}

// streams starts fresh Sluice processes with target's config, opens n
// streams through them that send a token every 2 s, and reads their
// memory once all are open. One process holds two sockets per stream:
// where the open-file limit does not allow that for n streams, the streams
// are shared out between as many processes as needed, and their memory
// summed (each process's own baseline included).
func (r *runner) streams(ctx context.Context, target string, n int, fileLimit uint64) (*StreamsResult, error) {
	fit := max((int(fileLimit)-200)/2, 1)
	procs := (n + fit - 1) / fit
	res := &StreamsResult{Requested: n, Procs: procs}
	if procs > 1 {
		r.logf("open-file limit %d: %d streams shared by %d Sluice processes", fileLimit, n, procs)
	}
	ps := make([]*proc, procs)
	defer func() {
		for _, p := range ps {
			if p != nil {
				p.stop()
			}
		}
	}()
	for i := range ps {
		p, err := r.startSluice(target)
		if err != nil {
			return nil, err
		}
		ps[i] = p
		// One request first, so the idle figure includes a warmed-up pool.
		c := Case{Name: "warm", Stream: true, Clients: 1, Tokens: 16}
		if _, err := load.Run(ctx, loadConfig(c, "http://"+p.addr+"/up/v1/chat/completions", 200*time.Millisecond)); err != nil {
			return nil, err
		}
		m, err := p.memory()
		if err != nil {
			return nil, err
		}
		res.Idle.RSS += m.RSS
		res.Idle.Peak += m.Peak
	}
	var opened atomic.Int64
	all := make(chan struct{})
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, procs)
	for i, p := range ps {
		share := n / procs
		if i < n%procs {
			share++
		}
		wg.Go(func() {
			_, errs[i] = load.Run(runCtx, load.Config{
				URL: "http://" + p.addr + "/up/v1/chat/completions", Stream: true, SimHeaders: true,
				Clients: share, Duration: 5 * time.Minute,
				Ramp:    time.Duration(share) * time.Second / 2000, // 2,000 new connections a second
				Headers: map[string]string{"x-sim-itl": "2s"},
				Prompt:  load.Dist{Mean: 50}, Output: load.Dist{Mean: 100000},
				OnFirstToken: func(time.Duration) {
					if opened.Add(1) == int64(n) {
						close(all)
					}
				},
			})
		})
	}
	select {
	case <-all:
	case <-time.After(90 * time.Second):
	case <-ctx.Done():
	}
	res.OpenIn = time.Since(start)
	res.Open = int(opened.Load())
	r.logf("streams via %s: %d of %d open after %v", target, res.Open, n, res.OpenIn.Round(time.Millisecond))
	time.Sleep(2 * time.Second) // let every stream get a token through: buffers in use
	var err error
	for _, p := range ps {
		m, merr := p.memory()
		if err = merr; err != nil {
			break
		}
		res.Loaded.RSS += m.RSS
		res.Loaded.Peak += m.Peak
	}
	if err == nil {
		res.Upstream, err = r.upstream.memory()
	}
	cancel()
	wg.Wait()
	for _, e := range errs {
		if err == nil {
			err = e
		}
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
