package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/deploy/tools/image"
)

const (
	repoRoot = "../../.."
	chartDir = repoRoot + "/deploy/helm/sluice"
	// envSluice names the sluice binary the rendered configs are
	// validated with: `make chart-check` builds it and sets it.
	envSluice = "SLUICE_BIN"
)

func sluiceBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(envSluice)
	if bin == "" {
		t.Fatalf("%s must name a sluice binary to validate the rendered configs with: run `make chart-check`", envSluice)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v", envSluice, err)
	}
	return bin
}

// rendered is a chart rendered with some values, looked up by kind/name.
type rendered struct {
	t  *testing.T
	ms []Manifest
}

func render(t *testing.T, vals map[string]any, kube ...string) rendered {
	t.Helper()
	rel := DefaultRelease
	if len(kube) > 0 {
		rel.KubeVersion = kube[0]
	}
	ms, _, err := Render(chartDir, vals, rel)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return rendered{t, ms}
}

func renderErr(t *testing.T, vals map[string]any) error {
	t.Helper()
	_, _, err := Render(chartDir, vals, DefaultRelease)
	return err
}

// values builds a values tree from Helm --set expressions.
func values(t *testing.T, sets ...string) map[string]any {
	t.Helper()
	v, err := Values(nil, sets)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (r rendered) find(kind, name string) (Manifest, bool) {
	for _, m := range r.ms {
		if m.Kind == kind && m.Name == name {
			return m, true
		}
	}
	return Manifest{}, false
}

// get decodes kind/name strictly into out: a field Kubernetes does not
// know is an error, as the API server's strict field validation makes it.
func (r rendered) get(kind, name string, out any) {
	r.t.Helper()
	m, ok := r.find(kind, name)
	if !ok {
		r.t.Fatalf("no %s %s rendered; have %v", kind, name, r.names())
	}
	if err := yaml.UnmarshalStrict([]byte(m.Content), out); err != nil {
		r.t.Fatalf("%s %s: %v\n%s", kind, name, err, m.Content)
	}
}

func (r rendered) names() []string {
	var out []string
	for _, m := range r.ms {
		out = append(out, m.Kind+"/"+m.Name)
	}
	sort.Strings(out)
	return out
}

// config is the Sluice config the ConfigMap holds, decoded.
func (r rendered) config() (raw string, cfg map[string]any) {
	r.t.Helper()
	var cm corev1.ConfigMap
	r.get("ConfigMap", "sluice", &cm)
	raw = cm.Data["sluice.yaml"]
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
		r.t.Fatalf("config: %v\n%s", err, raw)
	}
	return raw, cfg
}

// validate runs `sluice validate` on the rendered config with env (the
// variables the pod gets from its Secrets).
func (r rendered) validate(env map[string]string) {
	r.t.Helper()
	raw, _ := r.config()
	path := filepath.Join(r.t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(sluiceBin(r.t), "validate", "-config", path)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("sluice validate on the rendered config: %v\n%s\n%s", err, out, raw)
	}
	if !strings.Contains(string(out), ": ok (") {
		r.t.Fatalf("sluice validate: %s", out)
	}
}

// podEnv is what the pod's environment holds: literal values, and the
// values of the Secrets it references that the chart rendered. A reference
// to a Secret the chart did not render must be one the values named.
func (r rendered) podEnv(c corev1.Container, external ...string) map[string]string {
	r.t.Helper()
	secret := func(name string) map[string][]byte {
		var s corev1.Secret
		if _, ok := r.find("Secret", name); !ok {
			if !slices.Contains(external, name) {
				r.t.Errorf("the pod references Secret %s, which is neither rendered nor an existing one from the values", name)
			}
			return nil
		}
		r.get("Secret", name, &s)
		return s.Data
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if data := secret(ref.Name); data != nil {
				v, ok := data[ref.Key]
				if !ok {
					r.t.Errorf("%s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
				}
				env[e.Name] = string(v)
			} else {
				env[e.Name] = "from-an-existing-secret-0123456789"
			}
		}
	}
	for _, ef := range c.EnvFrom {
		for k, v := range secret(ef.SecretRef.Name) {
			env[k] = string(v)
		}
	}
	return env
}

func deployment(r rendered) (appsv1.Deployment, corev1.Container) {
	r.t.Helper()
	var d appsv1.Deployment
	r.get("Deployment", "sluice", &d)
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		r.t.Fatalf("%d containers", n)
	}
	return d, d.Spec.Template.Spec.Containers[0]
}

func port(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// The fleet with 3 replicas, the bundled Redis with a password and an
// injected provider key: replicas, probes, env, volumes, grace period,
// Service, PodDisruptionBudget, Redis, and a config that passes `sluice
// validate` with the environment the pod gets.
func TestTemplateThreeReplicas(t *testing.T) {
	t.Parallel()
	vals := values(t,
		"replicaCount=3",
		"secrets.env.OPENAI_API_KEY=sk-test-0123",
		"redis.auth.password=redis-secret",
		"config.providers[0].name=openai",
		"config.providers[0].upstream=https://api.openai.com",
		"config.providers[0].match.path_prefix=/openai",
		"config.providers[0].api_key_env=OPENAI_API_KEY",
		"config.providers[0].limit.ceiling=60",
		"config.providers[0].limit.fleet=strict",
		"config.cluster.key_prefix=sluice-prod",
	)
	r := render(t, vals)
	t.Logf("rendered for 3 replicas:\n%s", Summary(r.ms))
	d, c := deployment(r)

	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", d.Spec.Replicas)
	}
	if !matches(d.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("selector %v does not match the pod's labels %v", d.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
	}
	if s := d.Spec.Strategy; s.RollingUpdate == nil || s.RollingUpdate.MaxUnavailable.IntValue() != 0 || s.RollingUpdate.MaxSurge.IntValue() != 1 {
		t.Errorf("strategy %+v, want a rolling update with maxUnavailable 0, maxSurge 1", s)
	}

	// The config, as the pod reads it.
	_, cfg := r.config()
	if !slices.Equal(c.Args, []string{"serve", "-config", "/etc/sluice/sluice.yaml", "-log-level", "info"}) {
		t.Errorf("args %q", c.Args)
	}
	if Dig(cfg, "listen") != fmt.Sprintf("0.0.0.0:%d", port(c, "http")) || Dig(cfg, "admin", "listen") != fmt.Sprintf("0.0.0.0:%d", port(c, "admin")) {
		t.Errorf("listen %v and admin.listen %v do not match the container ports %v", Dig(cfg, "listen"), Dig(cfg, "admin", "listen"), c.Ports)
	}
	if got := Dig(cfg, "cluster"); fmt.Sprint(got) != "map[expected_replicas:3 key_prefix:sluice-prod password_env:REDIS_PASSWORD redis:sluice-redis:6379]" {
		t.Errorf("cluster block %v", got)
	}
	if Dig(cfg, "providers") == nil {
		t.Error("the providers from the values are not in the config")
	}

	// Probes on the admin listener.
	for name, p := range map[string]*corev1.Probe{"/readyz": c.ReadinessProbe, "/healthz": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "admin" || port(c, "admin") != 9090 {
			t.Errorf("probe %s: %+v", name, p)
		}
	}

	// Graceful termination: longer than shutdown.grace plus the preStop
	// sleep, which runs first.
	grace, err := time.ParseDuration(fmt.Sprint(Dig(cfg, "shutdown", "grace")))
	if err != nil {
		t.Fatal(err)
	}
	pre := c.Lifecycle.PreStop.Sleep.Seconds
	if tgp := *d.Spec.Template.Spec.TerminationGracePeriodSeconds; time.Duration(tgp)*time.Second <= grace+time.Duration(pre)*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d is not above shutdown.grace %v + preStop %ds", tgp, grace, pre)
	}

	// Volumes: the ConfigMap as a directory, never through subPath.
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/etc/sluice" || c.VolumeMounts[0].SubPath != "" || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("mounts %+v, want the config directory /etc/sluice, read-only, without subPath", c.VolumeMounts)
	}
	if v := d.Spec.Template.Spec.Volumes; len(v) != 1 || v[0].ConfigMap == nil || v[0].ConfigMap.Name != "sluice" || len(v[0].ConfigMap.Items) != 0 {
		t.Errorf("volumes %+v", v)
	}

	// Security: the image's user, nothing writable, no token mounted.
	ps := d.Spec.Template.Spec.SecurityContext
	if ps == nil || ps.RunAsUser == nil || *ps.RunAsUser != image.UID || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot {
		t.Errorf("pod security context %+v, want non-root user %d", ps, image.UID)
	}
	if sc := c.SecurityContext; sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Errorf("container security context %+v", sc)
	}

	// Environment: the key and the Redis password from rendered Secrets.
	env := r.podEnv(c)
	if env["OPENAI_API_KEY"] != "sk-test-0123" || env["REDIS_PASSWORD"] != "redis-secret" || env["GOMEMLIMIT"] != "900MiB" {
		t.Errorf("pod environment %v", env)
	}
	r.validate(env)

	// Service to the http port; PDB over the same pods.
	var svc corev1.Service
	r.get("Service", "sluice", &svc)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" || !matches(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Errorf("service %+v", svc.Spec)
	}
	var pdb policyv1.PodDisruptionBudget
	r.get("PodDisruptionBudget", "sluice", &pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !matches(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("PDB %+v", pdb.Spec)
	}

	// The bundled Redis: its Service, its password, and no selector of
	// Sluice's matching its pod.
	var rd appsv1.Deployment
	r.get("Deployment", "sluice-redis", &rd)
	var rsvc corev1.Service
	r.get("Service", "sluice-redis", &rsvc)
	rlabels := rd.Spec.Template.Labels
	for what, sel := range map[string]map[string]string{"Service": svc.Spec.Selector, "Deployment": d.Spec.Selector.MatchLabels, "PDB": pdb.Spec.Selector.MatchLabels} {
		if matches(sel, rlabels) {
			t.Errorf("Sluice's %s selector %v matches the Redis pod %v", what, sel, rlabels)
		}
	}
	if !matches(rsvc.Spec.Selector, rlabels) || rsvc.Spec.Ports[0].Port != 6379 {
		t.Errorf("redis service %+v", rsvc.Spec)
	}
	rc := rd.Spec.Template.Spec.Containers[0]
	if renv := r.podEnv(rc); renv["REDIS_PASSWORD"] != "redis-secret" || !slices.Contains(rc.Args, "--requirepass") {
		t.Errorf("bundled redis: env %v, args %q", renv, rc.Args)
	}

	// Off by default.
	for _, kind := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"} {
		if _, ok := r.find(kind, "sluice"); ok {
			t.Errorf("%s rendered by default", kind)
		}
	}
}

// The chart's defaults render, pass validation and lint.
func TestDefaults(t *testing.T) {
	t.Parallel()
	r := render(t, nil)
	_, c := deployment(r)
	r.validate(r.podEnv(c))
	_, cfg := r.config()
	if Dig(cfg, "cluster", "redis") != "sluice-redis:6379" || Dig(cfg, "cluster", "password_env") != nil {
		t.Errorf("default cluster block %v", Dig(cfg, "cluster"))
	}
}

// helm lint: no warnings or errors, with the defaults and with every
// option on.
func TestLint(t *testing.T) {
	t.Parallel()
	for name, vals := range map[string]map[string]any{
		"defaults": nil,
		"everything on": values(t, "replicaCount=3", "redis.mode=external", "redis.external.address=rediss://sluice@redis.internal:6380/0",
			"redis.auth.existingSecret=redis", "adminToken.enabled=true", "adminToken.existingSecret=admin",
			"metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true", "metrics.prometheusRule.enabled=true",
			"secrets.existingSecret=keys", "restartOnConfigChange=true"),
	} {
		problems, info := Lint(chartDir, vals)
		if len(problems) > 0 {
			t.Errorf("%s: helm lint: %s", name, strings.Join(problems, "\n"))
		}
		t.Logf("%s: helm lint: %d informational messages %q", name, len(info), info)
	}
}

// The monitors and the rules are opt-in; the ServiceMonitor scrapes the
// admin Service only (never the client Service), both set job="sluice",
// send the admin token when there is one, and the PrometheusRule holds
// the repository's rule file.
func TestMonitoring(t *testing.T) {
	t.Parallel()
	r := render(t, values(t, "metrics.serviceMonitor.enabled=true", "metrics.podMonitor.enabled=true",
		"metrics.prometheusRule.enabled=true", "metrics.serviceMonitor.labels.release=kube-prometheus",
		"adminToken.enabled=true", "adminToken.value=0123456789abcdef0123"))
	sm, ok := r.find("ServiceMonitor", "sluice")
	if !ok {
		t.Fatalf("no ServiceMonitor: %v", r.names())
	}
	var admin, client corev1.Service
	r.get("Service", "sluice-admin", &admin)
	r.get("Service", "sluice", &client)
	sel := toStrings(Dig(sm.Object, "spec", "selector", "matchLabels"))
	if !matches(sel, admin.Labels) || matches(sel, client.Labels) {
		t.Errorf("ServiceMonitor selector %v: admin service labels %v, client service labels %v", sel, admin.Labels, client.Labels)
	}
	if admin.Spec.ClusterIP != "None" || admin.Spec.Ports[0].Name != "admin" {
		t.Errorf("admin service %+v", admin.Spec)
	}
	if Dig(sm.Object, "metadata", "labels", "release") != "kube-prometheus" {
		t.Error("serviceMonitor.labels not applied")
	}
	pm, _ := r.find("PodMonitor", "sluice")
	for _, m := range []Manifest{sm, pm} {
		ep := List(m.Object, "spec", "endpoints")
		if m.Kind == "PodMonitor" {
			ep = List(m.Object, "spec", "podMetricsEndpoints")
		}
		if Dig(m.Object, "spec", "jobLabel") != "app.kubernetes.io/name" || len(ep) != 1 || ep[0]["port"] != "admin" || ep[0]["path"] != "/metrics" {
			t.Errorf("%s spec %v", m.Kind, Dig(m.Object, "spec"))
		}
		if Dig(ep[0], "authorization", "credentials", "name") != "sluice-admin-token" {
			t.Errorf("%s does not send the admin token: %v", m.Kind, ep[0])
		}
	}
	d, c := deployment(r)
	if d.Spec.Template.Labels["app.kubernetes.io/name"] != "sluice" {
		t.Errorf("pod label app.kubernetes.io/name (the job name) %q", d.Spec.Template.Labels["app.kubernetes.io/name"])
	}
	env := r.podEnv(c)
	if env["SLUICE_ADMIN_TOKEN"] != "0123456789abcdef0123" {
		t.Errorf("admin token env %v", env)
	}
	if _, cfg := r.config(); Dig(cfg, "admin", "token_env") != "SLUICE_ADMIN_TOKEN" {
		t.Errorf("admin block %v", Dig(cfg, "admin"))
	}
	r.validate(env)

	rule, ok := r.find("PrometheusRule", "sluice")
	if !ok {
		t.Fatal("no PrometheusRule")
	}
	canonical, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/sluice-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(chartDir, "files/sluice-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(canonical, shipped) {
		t.Error("deploy/helm/sluice/files/sluice-rules.yaml differs from deploy/prometheus/sluice-rules.yaml: run `make chart-files`")
	}
	var want map[string]any
	if err := yaml.Unmarshal(canonical, &want); err != nil {
		t.Fatal(err)
	}
	if got := Dig(rule.Object, "spec", "groups"); fmt.Sprint(got) != fmt.Sprint(want["groups"]) || len(List(rule.Object, "spec", "groups")) == 0 {
		t.Errorf("PrometheusRule groups differ from the rule file")
	}
}

// Redis bundled (the default), external, or none.
func TestRedisModes(t *testing.T) {
	t.Parallel()
	t.Run("external", func(t *testing.T) {
		t.Parallel()
		r := render(t, values(t, "redis.mode=external", "redis.external.address=rediss://sluice@redis.internal:6380/2",
			"redis.auth.existingSecret=platform-redis", "redis.auth.existingSecretKey=password"))
		for _, name := range []string{"Deployment/sluice-redis", "Service/sluice-redis", "Secret/sluice-redis"} {
			if slices.Contains(r.names(), name) {
				t.Errorf("%s rendered with an external Redis", name)
			}
		}
		_, cfg := r.config()
		if Dig(cfg, "cluster", "redis") != "rediss://sluice@redis.internal:6380/2" || Dig(cfg, "cluster", "password_env") != "REDIS_PASSWORD" {
			t.Errorf("cluster block %v", Dig(cfg, "cluster"))
		}
		_, c := deployment(r)
		if ref := c.Env[0].ValueFrom.SecretKeyRef; c.Env[0].Name != "REDIS_PASSWORD" || ref.Name != "platform-redis" || ref.Key != "password" {
			t.Errorf("REDIS_PASSWORD from %+v", c.Env[0])
		}
		r.validate(r.podEnv(c, "platform-redis"))
	})
	t.Run("none", func(t *testing.T) {
		t.Parallel()
		r := render(t, values(t, "redis.mode=none", "redis.auth.password=unused", "replicaCount=1"))
		if _, cfg := r.config(); Dig(cfg, "cluster") != nil {
			t.Errorf("a cluster block without Redis: %v", Dig(cfg, "cluster"))
		}
		for _, n := range r.names() {
			if strings.Contains(n, "redis") {
				t.Errorf("%s rendered without Redis", n)
			}
		}
		_, c := deployment(r)
		env := r.podEnv(c)
		if _, ok := env["REDIS_PASSWORD"]; ok {
			t.Error("REDIS_PASSWORD set without Redis")
		}
		r.validate(env)
	})
	t.Run("bundled without password", func(t *testing.T) {
		t.Parallel()
		r := render(t, nil)
		var rd appsv1.Deployment
		r.get("Deployment", "sluice-redis", &rd)
		if slices.Contains(rd.Spec.Template.Spec.Containers[0].Args, "--requirepass") {
			t.Error("--requirepass without a password")
		}
	})
}

// Values the chart refuses, each with a message that says what to do.
func TestRefusedValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sets []string
		want string
	}{
		{[]string{"config.listen=0.0.0.0:1"}, "config.listen is set by the chart"},
		{[]string{"config.admin.listen=0.0.0.0:1"}, "config.admin is set by the chart"},
		{[]string{"config.shutdown.grace=1s"}, "config.shutdown is set by the chart"},
		{[]string{"config.cluster.redis=x:1"}, "config.cluster.redis is set by the chart"},
		{[]string{"config.cluster.expected_replicas=2"}, "config.cluster.expected_replicas is set by the chart"},
		{[]string{"redis.mode=none", "config.cluster.heartbeat=1s"}, "config.cluster needs redis.mode bundled or external"},
		{[]string{"redis.mode=external"}, "redis.mode external needs redis.external.address"},
		{[]string{"redis.mode=sentinel"}, "redis.mode must be bundled, external or none"},
		{[]string{"adminToken.enabled=true"}, "adminToken.enabled needs adminToken.value or adminToken.existingSecret"},
	} {
		err := renderErr(t, values(t, tc.sets...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.sets, err, tc.want)
		}
	}
}

// The preStop sleep action exists from Kubernetes 1.30; on older clusters
// the chart leaves it out rather than render a pod the API refuses.
// restartOnConfigChange adds the config's checksum to the pod template.
func TestVersionedAndOptionalPodFields(t *testing.T) {
	t.Parallel()
	_, c := deployment(render(t, nil, "v1.29.4"))
	if c.Lifecycle != nil {
		t.Errorf("Kubernetes 1.29: lifecycle %+v, want none", c.Lifecycle)
	}
	_, c = deployment(render(t, nil))
	if c.Lifecycle == nil || c.Lifecycle.PreStop.Sleep.Seconds != 5 {
		t.Errorf("Kubernetes %s: lifecycle %+v, want a 5 s preStop sleep", DefaultKubeVersion, c.Lifecycle)
	}
	d, _ := deployment(render(t, nil))
	if _, ok := d.Spec.Template.Annotations["checksum/config"]; ok {
		t.Error("checksum/config without restartOnConfigChange: a config change would restart the pods")
	}
	d, _ = deployment(render(t, values(t, "restartOnConfigChange=true")))
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(d.Spec.Template.Annotations["checksum/config"]) {
		t.Errorf("restartOnConfigChange: annotations %v", d.Spec.Template.Annotations)
	}
}

// Every value of values.yaml is in docs/deploy.md's table of values.
func TestValuesDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs/deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		// config, resources, probes and security contexts are documented
		// as blocks: their keys are Sluice's or Kubernetes'.
		if !ok || len(m) == 0 || slices.Contains([]string{"config", "resources", "readinessProbe", "livenessProbe",
			"podSecurityContext", "securityContext", "strategy", "redis.bundled.resources"}, prefix) {
			paths = append(paths, prefix)
			return
		}
		for k, sub := range m {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			walk(p, sub)
		}
	}
	walk("", vals)
	sort.Strings(paths)
	for _, p := range paths {
		if !bytes.Contains(doc, []byte("| `"+p+"` |")) {
			t.Errorf("value %s is not in docs/deploy.md's table (a row starting | `%s` |)", p, p)
		}
	}
	if len(paths) < 40 {
		t.Errorf("only %d values found", len(paths))
	}
}

func toStrings(v any) map[string]string {
	m, _ := v.(map[string]any)
	out := map[string]string{}
	for k, x := range m {
		out[k] = fmt.Sprint(x)
	}
	return out
}
