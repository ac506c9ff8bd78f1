// Package prometheus tests Sluice's alerting rules and Grafana dashboard
// against a real Prometheus: the test runs Sluice under load, lets
// Debian's prometheus scrape it and evaluate the rules, and asks it for
// every dashboard and rule expression through its HTTP API. Each one must
// return data. `make prometheus-check` runs it.
package prometheus

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const repoRoot = "../../.."

// rateInterval replaces Grafana's $__rate_interval. With a 1 s scrape
// interval Grafana would use at least 4 s; 20 s keeps enough samples in
// every window on a loaded machine.
const rateInterval = "20s"

// underlying lists the alerts whose condition the test's traffic cannot
// make true, with the expression evaluated instead: the series the alert
// compares. Every other alert's own expression must return data, that is,
// fire (its `for` apart).
var underlying = map[string]string{
	// Lease timeouts need the strict fleet full until a request's
	// deadline: a race between replicas' shares this test does not force.
	"SluiceLeaseTimeouts": `sum by (job, provider) (rate(sluice_cluster_lease_requests_total{result="timeout"}[5m]))`,
	// The estimate is calibrated here (as it should be): the median
	// ratio the alert compares, where there are enough waits to judge.
	"SluiceWaitEstimateOff": `provider_class:sluice_queue_wait_estimate_ratio:p50_15m and provider_class:sluice_queue_wait_estimate_waits:rate15m > 1 / 60`,
}

// expression is one PromQL expression to evaluate, and where it comes from.
type expression struct {
	source string // "rule NAME" or "panel TITLE/REF"
	expr   string
}

// The test's world, each piece there to give some expression its series:
//
//   - a redis-server and three Sluice replicas: A (plain HTTP) and B (TLS,
//     with a certificate that expires in 36 hours) form a fleet through
//     Redis; C points at a Redis that is not there (degraded), and its
//     config file is broken after it started (a rejected reload);
//   - one simulated provider (sluice-bench sim) behind six providers on A
//     and B: sim (streams, strict fleet mode, a rate: block, classes and
//     tenants by header), tight (a fixed limit of 2 and a queue of 2: the
//     queue refuses), rated (2 requests a second: rate refusals), refusing
//     (every answer a 529: drops, retries, the retry budget, the limit at
//     its minimum), multi (a good upstream and a dead one: failovers, an
//     open breaker) and dead (its only upstream refuses connections: no
//     upstream, failed requests);
//   - load: sluice-bench load on A's sim, and the test's own clients for
//     the other providers, for classes and tenants, and over TLS to B;
//   - prometheus scraping A, B, C and a port nobody listens on (a target
//     down) every second, evaluating sluice-rules.yaml every second.
func TestDashboardAndRulesAgainstPrometheus(t *testing.T) {
	promBin := need(t, "prometheus", "install Debian's prometheus package (make prometheus)")
	redisBin := need(t, "redis-server", "install Debian's redis-server package (make redis-server)")
	sluice := binary(t, "SLUICE_BIN")
	bench := binary(t, "SLUICE_BENCH_BIN")
	dir := t.TempDir()
	began := time.Now()

	exprs := append(ruleExpressions(t), dashboardExpressions(t)...)

	// Redis and the simulated provider.
	redisAddr := freeAddr(t)
	_, redisPort, _ := strings.Cut(redisAddr, ":")
	redis := start(t, "redis-server", redisBin, "--port", redisPort, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	waitTCP(t, redis, redisAddr)
	simAddr := freeAddr(t)
	sim := start(t, "sim", bench, "sim", "-listen", simAddr, "-timescale", "0.1", "-retry-after", "-1s")
	waitTCP(t, sim, simAddr)
	deadAddr := freeAddr(t) // nothing listens here

	// The replicas.
	certFile, keyFile, roots := certificate(t, dir, time.Now().Add(36*time.Hour))
	type replica struct {
		name, listen, admin, config string
		proc                        *proc
	}
	replicas := []*replica{{name: "a"}, {name: "b"}, {name: "c"}}
	for _, r := range replicas {
		r.listen, r.admin, r.config = freeAddr(t), freeAddr(t), filepath.Join(dir, r.name+".yaml")
		var cfg string
		switch r.name {
		case "a":
			cfg = fleetConfig(r.listen, r.admin, redisAddr, simAddr, deadAddr, "")
		case "b":
			cfg = fleetConfig(r.listen, r.admin, redisAddr, simAddr, deadAddr, fmt.Sprintf("tls: { cert_file: %s, key_file: %s }\n", certFile, keyFile))
		case "c":
			cfg = fmt.Sprintf("listen: %s\nadmin: { listen: %s }\nshutdown: { grace: 1s }\ncluster: { redis: %q, heartbeat: 200ms, expected_replicas: 3 }\nproviders:\n  - { name: sim, upstream: \"http://%s\", match: { path_prefix: /sim } }\n", r.listen, r.admin, deadAddr, simAddr)
		}
		writeFile(t, r.config, cfg)
		if out, err := runOutput(sluice, "validate", "-config", r.config); err != nil {
			t.Fatalf("replica %s: sluice validate: %v\n%s\n%s", r.name, err, out, cfg)
		}
		r.proc = start(t, "sluice "+r.name, sluice, "serve", "-config", r.config, "-log-level", "warn")
	}
	for _, r := range replicas {
		waitHTTP(t, r.proc, "http://"+r.admin+"/readyz", 10*time.Second)
	}
	// C rejects its next config: the reload metrics say so.
	writeFile(t, replicas[2].config, "listen: [this is not a config\n")

	// Prometheus.
	promAddr := freeAddr(t)
	rules, err := filepath.Abs(filepath.Join(repoRoot, "deploy/prometheus/sluice-rules.yaml"))
	must(t, err, "rules path")
	promCfg := filepath.Join(dir, "prometheus.yml")
	writeFile(t, promCfg, fmt.Sprintf(`global: { scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s }
rule_files: [%q]
scrape_configs:
  - job_name: sluice
    static_configs:
      - targets: [%q, %q, %q, %q]
`, rules, replicas[0].admin, replicas[1].admin, replicas[2].admin, freeAddr(t)))
	prom := start(t, "prometheus", promBin, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	api := "http://" + promAddr
	waitHTTP(t, prom, api+"/-/ready", 30*time.Second)
	// The first scrape of every target before any traffic, so that the
	// counters' first samples are their zeros.
	waitFor(t, prom, 15*time.Second, "every target scraped", func() bool {
		v, err := query(api, `count(up{job="sluice"})`, time.Now())
		return err == nil && len(v) == 1 && v[0].value == 4
	})

	// Load.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	a, b := replicas[0], replicas[1]
	start(t, "sluice-bench load", bench, "load", "-url", "http://"+a.listen+"/sim/v1/chat/completions",
		"-clients", "16", "-think", "200ms", "-duration", "60s", "-sim-headers", "-prompt", "400", "-output", "60")
	plain, overTLS := httpClient(nil), httpClient(roots)
	var sent, ok atomic.Int64
	drive := func(c *http.Client, base, provider string, workers int, headers map[string]string) {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					code := post(ctx, c, base+"/"+provider+"/v1/chat/completions", headers)
					sent.Add(1)
					if code == http.StatusOK {
						ok.Add(1)
					} else {
						sleep(ctx, 20*time.Millisecond)
					}
				}
			}()
		}
	}
	aURL, bURL := "http://"+a.listen, "https://"+b.listen
	drive(plain, aURL, "sim", 2, map[string]string{"X-Sluice-Class": "interactive", "X-Tenant": "team-a"})
	drive(plain, aURL, "sim", 2, map[string]string{"X-Sluice-Class": "batch", "X-Tenant": "team-b"})
	drive(overTLS, bURL, "sim", 2, map[string]string{"X-Sluice-Class": "interactive", "X-Tenant": "team-c"})
	drive(overTLS, bURL, "sim", 1, map[string]string{"X-Sluice-Class": "batch", "X-Tenant": "team-c"})
	drive(plain, aURL, "tight", 6, nil)
	drive(plain, aURL, "rated", 4, nil)
	drive(plain, aURL, "refusing", 3, nil)
	drive(plain, aURL, "multi", 3, nil)
	drive(plain, aURL, "dead", 2, nil)

	// Let the series fill: rates need two samples in their window, the
	// breakers must open, the limit of refusing must reach its minimum.
	waitFor(t, prom, 45*time.Second, "traffic on every provider and the conditions the alerts watch", func() bool {
		for _, e := range []string{
			`count(sum by (provider) (rate(sluice_requests_total{instance="` + a.admin + `"}[10s])) > 0) >= 5`,
			`sluice_upstream_breaker_state{provider="multi",upstream="dead",state="open"} == 1`,
			`sluice_concurrency_limit{provider="refusing",instance="` + a.admin + `"} == 2`,
			`sum(rate(sluice_requests_total{instance="` + b.admin + `"}[10s])) > 0`,
			`sluice_config_reload_success{instance="` + replicas[2].admin + `"} == 0`,
		} {
			if v, err := query(api, e, time.Now()); err != nil || len(v) == 0 {
				return false
			}
		}
		return time.Since(began) > 25*time.Second // a few rate windows of history
	})

	// Evaluate everything at one instant, with traffic still running.
	at := time.Now()
	var failed []string
	var rows []string
	for _, e := range exprs {
		v, err := query(api, e.expr, at)
		finite := 0
		for _, s := range v {
			if !math.IsNaN(s.value) && !math.IsInf(s.value, 0) {
				finite++
			}
		}
		switch {
		case err != nil:
			failed = append(failed, fmt.Sprintf("%s: %v\n    %s", e.source, err, e.expr))
		case finite == 0:
			failed = append(failed, fmt.Sprintf("%s: no data (%d series, none finite)\n    %s", e.source, len(v), e.expr))
		}
		rows = append(rows, fmt.Sprintf("%3d series  %s", len(v), e.source))
	}
	stop()
	wg.Wait()

	// Rule health: every rule evaluated without error.
	health := ruleHealth(t, api)
	t.Logf("%d expressions evaluated at %s (%d from the rules, %d from the dashboard), %d returned data; %d requests sent by the test's clients (%d answered 200); rules healthy: %s\n%s",
		len(exprs), at.Format(time.RFC3339), countPrefix(exprs, "rule "), countPrefix(exprs, "panel ")+countPrefix(exprs, "variable "),
		len(exprs)-len(failed), sent.Load(), ok.Load(), health, strings.Join(rows, "\n"))
	for alert, expr := range underlying {
		t.Logf("alert %s evaluated by its underlying series: %s", alert, expr)
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d expressions returned no data:\n%s", len(failed), len(exprs), strings.Join(failed, "\n"))
	}
	if d := time.Since(began); d > 100*time.Second {
		t.Errorf("the test took %v: keep it under 100 s", d)
	}
}

// fleetConfig is replica A's and B's config (B adds tls).
func fleetConfig(listen, admin, redis, sim, dead, tls string) string {
	return fmt.Sprintf(`listen: %s
admin: { listen: %s }
%sshutdown: { grace: 1s }
cluster: { redis: %q, key_prefix: promtest, heartbeat: 200ms, lease_ttl: 2s, expected_replicas: 2 }
clients: { default: { max_class: interactive } }
providers:
  - name: sim
    upstream: http://%s
    match: { path_prefix: /sim }
    dialect: openai
    limit: { ceiling: 40, initial: 10, window: 500ms, fleet: strict }
    queue: { max_waiting: 100, max_wait: 5s, tenant_header: X-Tenant, tenant_header_trusted: true }
    rate: { rpm: 600000 }
  - name: tight
    upstream: http://%s
    match: { path_prefix: /tight }
    limit: { algorithm: fixed, ceiling: 2 }
    queue: { max_waiting: 2, max_wait: 300ms }
  - name: rated
    upstream: http://%s
    match: { path_prefix: /rated }
    rate: { rpm: 120, request_window: 1s }
    queue: { max_wait: 200ms }
  - name: refusing
    upstream: http://%s
    match: { path_prefix: /refusing }
    headers: { x-sim-fail: "529" }
    limit: { algorithm: aimd, initial: 4, min: 2, cooldown: 0s }
    retries: { max_attempts: 2, backoff_base: 1ms, backoff_max: 5ms }
  - name: multi
    upstreams:
      - { name: good, url: "http://%s" }
      - { name: dead, url: "http://%s" }
    match: { path_prefix: /multi }
    breaker: { consecutive_failures: 2, open_time: 1m }
  - name: dead
    upstream: http://%s
    match: { path_prefix: /dead }
    breaker: { consecutive_failures: 2, open_time: 1s, half_open_probes: 1 }
`, listen, admin, tls, redis, sim, sim, sim, sim, sim, dead, dead)
}

// post sends one streaming chat request and reads the answer to its end.
func post(ctx context.Context, c *http.Client, u string, headers map[string]string) int {
	body := `{"model":"sim-model","stream":true,"max_tokens":60,"messages":[{"role":"user","content":"hello"}]}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-sim-output-tokens", "40")
	req.Header.Set("x-sim-prompt-tokens", "300")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func waitFor(t *testing.T, p *proc, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", within, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
	_ = p
}

// sample is one element of an instant query's result.
type sample struct {
	labels map[string]string
	value  float64
}

// query evaluates expr at the given time through /api/v1/query.
func query(api, expr string, at time.Time) ([]sample, error) {
	resp, err := http.PostForm(api+"/api/v1/query", url.Values{"query": {expr}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	parse := func(v []any) float64 {
		s, _ := v[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return math.NaN()
		}
		return f
	}
	switch r.Data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  []any             `json:"value"`
		}
		if err := json.Unmarshal(r.Data.Result, &vec); err != nil {
			return nil, err
		}
		out := make([]sample, len(vec))
		for i, s := range vec {
			out[i] = sample{s.Metric, parse(s.Value)}
		}
		return out, nil
	case "scalar":
		var v []any
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, err
		}
		return []sample{{nil, parse(v)}}, nil
	}
	return nil, fmt.Errorf("result type %s", r.Data.ResultType)
}

// ruleExpressions: every recording rule's and alert's expression (or,
// for the alerts in underlying, the series they compare).
func ruleExpressions(t *testing.T) []expression {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/sluice-rules.yaml"))
	must(t, err, "rules")
	var f struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Record, Alert, Expr, For string
				Labels, Annotations      map[string]string
			}
		}
	}
	must(t, yaml.UnmarshalStrict(b, &f), "rules")
	var out []expression
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			switch {
			case r.Record != "":
				out = append(out, expression{"rule " + r.Record, r.Expr})
			case underlying[r.Alert] != "":
				out = append(out, expression{"rule " + r.Alert + " (underlying series)", underlying[r.Alert]})
			default:
				out = append(out, expression{"rule " + r.Alert, r.Expr})
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d rules", len(out))
	}
	return out
}

// dashboardExpressions: every panel target of the Grafana dashboard, and
// the metrics its variables list labels of, with the variables replaced
// as Grafana would with "All" selected.
func dashboardExpressions(t *testing.T) []expression {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/grafana/sluice.json"))
	must(t, err, "dashboard")
	type panel struct {
		Title   string
		Targets []struct{ Expr, RefID string }
		Panels  []json.RawMessage
	}
	var d struct {
		Panels     []panel
		Templating struct {
			List []struct {
				Name  string
				Query any
			}
		}
	}
	must(t, json.Unmarshal(b, &d), "dashboard")
	repl := strings.NewReplacer("$__rate_interval", rateInterval, "${provider}", ".*", "$provider", ".*", "${job}", ".*", "$job", ".*")
	var out []expression
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, expression{"panel " + p.Title + "/" + tg.RefID, repl.Replace(tg.Expr)})
			}
			for _, raw := range p.Panels {
				var sub panel
				must(t, json.Unmarshal(raw, &sub), "nested panel")
				walk([]panel{sub})
			}
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((.+), *\w+\)$`)
	for _, v := range d.Templating.List {
		q, _ := v.Query.(map[string]any)
		s, _ := q["query"].(string)
		if m := labelValues.FindStringSubmatch(s); m != nil {
			out = append(out, expression{"variable " + v.Name, m[1]})
		}
	}
	for _, e := range out {
		if strings.Contains(e.expr, "$") {
			t.Fatalf("%s: a variable the test does not replace: %s", e.source, e.expr)
		}
	}
	if len(out) < 60 {
		t.Fatalf("only %d dashboard expressions", len(out))
	}
	return out
}

// ruleHealth checks /api/v1/rules: every rule loaded and evaluated
// without error.
func ruleHealth(t *testing.T, api string) string {
	t.Helper()
	resp, err := http.Get(api + "/api/v1/rules")
	must(t, err, "rules API")
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
				}
			}
		}
	}
	must(t, json.NewDecoder(resp.Body).Decode(&r), "rules API")
	n := 0
	var bad []string
	for _, g := range r.Data.Groups {
		for _, rule := range g.Rules {
			n++
			if rule.Health != "ok" {
				bad = append(bad, fmt.Sprintf("%s: %s %s", rule.Name, rule.Health, rule.LastError))
			}
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 || n == 0 {
		t.Errorf("%d rules loaded; unhealthy: %v", n, bad)
	}
	return fmt.Sprintf("%d of %d", n-len(bad), n)
}

func countPrefix(es []expression, prefix string) int {
	n := 0
	for _, e := range es {
		if strings.HasPrefix(e.source, prefix) {
			n++
		}
	}
	return n
}
