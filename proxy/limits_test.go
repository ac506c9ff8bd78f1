package proxy

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
)

// TestConfigRulesOnConfigTestdata runs the config package's test files
// through the real rules (adaptive's, via ConfigRules): each bad file must
// produce the errors its "# want:" lines name, with the same file, line
// and field, and each good file must parse. The config package tests the
// same files with a stand-in for these rules; this keeps the two in step.
func TestConfigRulesOnConfigTestdata(t *testing.T) {
	t.Parallel()
	rules := ConfigRules()
	env := func(k string) (string, bool) {
		v, ok := map[string]string{"OPENAI_API_KEY": "sk-1", "ANTHROPIC_API_KEY": "sk-2", "SLUICE_TEST_EMPTY_KEY": "", "REDIS_PASSWORD": "pw-3"}[k]
		return v, ok
	}
	files, err := filepath.Glob("../config/testdata/*.yml")
	if err != nil || len(files) < 20 {
		t.Fatalf("config testdata: %d files, %v", len(files), err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		cfg, err := config.ParseWithEnv(name, data, rules, env)
		if strings.HasSuffix(name, ".good.yml") {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			} else if err := cfg.Validate(rules); err != nil {
				t.Errorf("%s: parsed config fails Validate: %v", name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
				if w = strings.ReplaceAll(w, "FILE", name); !strings.Contains(err.Error(), w) {
					t.Errorf("%s: missing %q in\n%v", name, w, err)
				}
			}
		}
	}
}

// TestConfigRulesAreAdaptives: the defaults config applies are adaptive's,
// and a default min and initial follow a small ceiling.
func TestConfigRulesAreAdaptives(t *testing.T) {
	t.Parallel()
	p := config.DefaultProvider(ConfigRules())
	if got, want := limitSettings(p.Limit), adaptive.DefaultSettings(); got != want {
		t.Errorf("default limit block %+v, want adaptive's %+v", got, want)
	}
	if got, want := queueSettings(p.Queue), adaptive.DefaultQueueSettings(); !reflect.DeepEqual(got, want) {
		t.Errorf("default queue block %+v, want adaptive's %+v", got, want)
	}
	cfg, err := config.Parse("c.yml", []byte("providers: [{name: a, upstream: 'http://a', match: {path_prefix: /a}, limit: {ceiling: 1}}]"), ConfigRules())
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Providers[0].Limit; l.Min != 1 || l.Initial != 1 {
		t.Errorf("ceiling 1: min %d initial %d, want 1 and 1", l.Min, l.Initial)
	}
}

// TestQueueClassesFromYAML: classes written without shares get max_share 1
// and saturated_share = max_share; every problem of the queue block is
// reported with its line.
func TestQueueClassesFromYAML(t *testing.T) {
	t.Parallel()
	good := `providers:
  - name: a
    upstream: http://a
    match: {path_prefix: /a}
    queue:
      classes:
        - {name: chat}
        - {name: bulk, max_share: 0.5}
        - {name: scavenger, max_share: 0.3, saturated_share: 0}
      default_class: chat
      tenant_header: X-Team
      retry_headers: [x-stainless-retry-count, x-retry-attempt]
`
	cfg, err := config.Parse("c.yml", []byte(good), ConfigRules())
	if err != nil {
		t.Fatal(err)
	}
	q := queueSettings(cfg.Providers[0].Queue)
	want := []adaptive.ClassSettings{{Name: "chat", MaxShare: 1, SaturatedShare: 1}, {Name: "bulk", MaxShare: 0.5, SaturatedShare: 0.5}, {Name: "scavenger", MaxShare: 0.3}}
	if !reflect.DeepEqual(q.Classes, want) || q.TenantHeader != "X-Team" || len(q.RetryHeaders) != 2 {
		t.Fatalf("queue settings %+v", q)
	}
	bad := `providers:
  - name: a
    upstream: http://a
    match: {path_prefix: /a}
    queue:
      classes:
        - {name: chat}
        - {name: Bulk, max_share: 1.5}
        - {name: chat, max_share: 0.5, saturated_share: 0.7}
      default_class: standard
      max_tenants: 0
`
	_, err = config.Parse("c.yml", []byte(bad), ConfigRules())
	for _, want := range []string{
		`c.yml:8: providers[0].queue.classes[1].name: must be 1 to 32 characters of a-z, 0-9, _ and -, got "Bulk"`,
		`c.yml:8: providers[0].queue.classes[1].max_share: must be greater than 0 and at most 1, got 1.5`,
		`c.yml:9: providers[0].queue.classes[2].name: duplicate class "chat" (also classes[0])`,
		`c.yml:9: providers[0].queue.classes[2].saturated_share: must be between 0 and max_share (0.5), got 0.7`,
		`c.yml:10: providers[0].queue.default_class: must be one of the classes (chat, Bulk, chat), got "standard"`,
		`c.yml:11: providers[0].queue.max_tenants: must be between 1 and 1000000, got 0`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("errors %v\nwant %s", err, want)
		}
	}
}

// A key adaptive no longer uses (limit.long_window) still loads, with a
// warning naming the file, line and field, so existing files keep working
// and their owners learn the key does nothing.
func TestDeprecatedLimitKeyWarns(t *testing.T) {
	t.Parallel()
	data := []byte("providers:\n  - name: a\n    upstream: http://a\n    match: {path_prefix: /a}\n    limit:\n      long_window: 200\n")
	cfg, err := config.Parse("d.yml", data, ConfigRules())
	if err != nil {
		t.Fatal(err)
	}
	want := "d.yml:6: providers[0].limit.long_window: has no effect"
	if len(cfg.Warnings) != 1 || !strings.HasPrefix(cfg.Warnings[0], want) {
		t.Fatalf("warnings %q, want one starting %q", cfg.Warnings, want)
	}
	cfg, err = config.Parse("d.yml", []byte("providers: [{name: a, upstream: 'http://a', match: {path_prefix: /a}}]"), ConfigRules())
	if err != nil || len(cfg.Warnings) != 0 {
		t.Fatalf("a file without the key: warnings %q, err %v", cfg.Warnings, err)
	}
}

// TestConfigRulesAreAdaptivesForAdmission: the rate, retries, breaker and
// upstream defaults config applies are adaptive's, and translate back
// unchanged.
func TestConfigRulesAreAdaptivesForAdmission(t *testing.T) {
	t.Parallel()
	r := ConfigRules()
	p := config.DefaultProvider(r)
	if got, want := rateSettings(p.Rate), adaptive.DefaultRateSettings(); got != want {
		t.Errorf("default rate block %+v, want adaptive's %+v", got, want)
	}
	if got, want := retrySettings(p.Retries), adaptive.DefaultRetrySettings(); got != want {
		t.Errorf("default retries block %+v, want adaptive's %+v", got, want)
	}
	if got, want := breakerSettings(p.Breaker), adaptive.DefaultBreakerSettings(); got != want {
		t.Errorf("default breaker block %+v, want adaptive's %+v", got, want)
	}
	if got, want := upstreamSettings(config.DefaultUpstream(r)), adaptive.DefaultUpstreamSettings(); got != want {
		t.Errorf("default upstream %+v, want adaptive's %+v", got, want)
	}
	full := adaptive.RateSettings{
		Limits: adaptive.Limits{Requests: 1, Tokens: 2, InputTokens: 3, OutputTokens: 4, RequestWindow: 10 * time.Second}, DefaultMaxOutputTokens: 5,
		ProviderHeaders: adaptive.HeadersIgnore,
		PerClient: adaptive.ClientRateSettings{Key: adaptive.ClientKeyHeader, Header: "X-T",
			Limits: adaptive.Limits{Requests: 6, Tokens: 7, InputTokens: 8, OutputTokens: 9, RequestWindow: 10 * time.Second}, MaxKeys: 10},
	}
	if got := rateSettings(rateConfig(full)); got != full {
		t.Errorf("rate round trip %+v, want %+v", got, full)
	}
	up := adaptive.UpstreamSettings{Name: "x", Weight: 2, Ceiling: 3, Limits: adaptive.Limits{Requests: 4, Tokens: 5, InputTokens: 6, OutputTokens: 7}}
	if got := upstreamSettings(upstreamConfig(up)); got != up {
		t.Errorf("upstream round trip %+v, want %+v", got, up)
	}
}

// TestConfigRulesServeUpstreams: this build serves upstreams: lists, so
// sluice validate and a reload accept one, names and all.
func TestConfigRulesServeUpstreams(t *testing.T) {
	t.Parallel()
	data := []byte("providers:\n  - name: a\n    match: {path_prefix: /a}\n    upstreams:\n      - url: http://a\n      - {name: b, url: http://b, weight: 3}\n")
	cfg, err := config.Parse("c.yml", data, ConfigRules())
	if err != nil {
		t.Fatal(err)
	}
	ups := providerSettings(&cfg.Providers[0]).Upstreams
	if len(ups) != 2 || ups[0].Name != "0" || ups[1].Name != "b" || ups[1].Weight != 3 {
		t.Fatalf("upstreams %+v", ups)
	}
}
