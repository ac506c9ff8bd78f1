package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/settings"
)

// The settings blocks as the config package applies them: defaults before
// decoding, completion from the keys written, problems and deprecations at
// their lines.

// TestDefaultProviderIsSettings: a provider's blocks default to the
// settings package's defaults, and a default min and initial follow a
// small ceiling.
func TestDefaultProviderIsSettings(t *testing.T) {
	t.Parallel()
	p := DefaultProvider()
	if p.Limit != settings.DefaultLimit() || p.Rate != settings.DefaultRate() || p.Retries != settings.DefaultRetries() ||
		p.Breaker != settings.DefaultBreaker() || !reflect.DeepEqual(p.Queue, settings.DefaultQueue()) {
		t.Errorf("default provider %+v", p)
	}
	if u := DefaultUpstream(); u.Upstream != settings.DefaultUpstream() {
		t.Errorf("default upstream %+v", u)
	}
	if c := DefaultCluster(); c.Fleet != settings.DefaultFleet() || c.Enabled() {
		t.Errorf("default cluster %+v", c)
	}
	cfg, err := Parse("c.yml", []byte("providers: [{name: a, upstream: 'http://a', match: {path_prefix: /a}, limit: {ceiling: 1}}]"))
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
	cfg, err := Parse("c.yml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.Providers[0].Queue
	want := []settings.Class{{Name: "chat", MaxShare: 1, SaturatedShare: 1}, {Name: "bulk", MaxShare: 0.5, SaturatedShare: 0.5}, {Name: "scavenger", MaxShare: 0.3}}
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
	_, err = Parse("c.yml", []byte(bad))
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
	cfg, err := Parse("d.yml", data)
	if err != nil {
		t.Fatal(err)
	}
	want := "d.yml:6: providers[0].limit.long_window: has no effect"
	if len(cfg.Warnings) != 1 || !strings.HasPrefix(cfg.Warnings[0], want) {
		t.Fatalf("warnings %q, want one starting %q", cfg.Warnings, want)
	}
	cfg, err = Parse("d.yml", []byte("providers: [{name: a, upstream: 'http://a', match: {path_prefix: /a}}]"))
	if err != nil || len(cfg.Warnings) != 0 {
		t.Fatalf("a file without the key: warnings %q, err %v", cfg.Warnings, err)
	}
}
