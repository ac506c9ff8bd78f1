package proxy

import (
	"testing"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

// TestProviderSettings: adaptive gets a provider's upstreams: entries,
// names and all, and one upstream: as a default entry named
// adaptive.SingleUpstream.
func TestProviderSettings(t *testing.T) {
	t.Parallel()
	data := []byte("providers:\n  - name: a\n    match: {path_prefix: /a}\n    upstreams:\n      - url: http://a\n      - {name: b, url: http://b, weight: 3}\n")
	cfg, err := config.Parse("c.yml", data)
	if err != nil {
		t.Fatal(err)
	}
	ups := providerSettings(&cfg.Providers[0]).Upstreams
	if len(ups) != 2 || ups[0].Name != "0" || ups[1].Name != "b" || ups[1].Weight != 3 {
		t.Fatalf("upstreams %+v", ups)
	}
	one := config.DefaultProvider()
	one.Upstream = "http://a"
	want := settings.DefaultUpstream()
	want.Name = adaptive.SingleUpstream
	want.Passthrough = true // no key injected: each client's key is its own account
	if ups := providerSettings(&one).Upstreams; len(ups) != 1 || ups[0] != want {
		t.Fatalf("one upstream: %+v, want %+v", ups, want)
	}
	one.APIKey = "injected"
	want.Passthrough = false
	if ups := providerSettings(&one).Upstreams; len(ups) != 1 || ups[0] != want {
		t.Fatalf("one upstream, key injected: %+v, want %+v", ups, want)
	}
}
