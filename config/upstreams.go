package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/settings"
)

// Upstream is one of several upstreams of a provider (upstreams:), e.g.
// two API keys, two regions, Azure deployments or vLLM replicas. The
// provider's dialect, auth, timeouts and limit apply to each; headers are
// merged (the upstream's win) and its api_key_env replaces the
// provider's.
type Upstream struct {
	// Upstream holds its name, weight, ceiling and known quota (rate:):
	// what the upstream choice uses. Its name is [a-z0-9_-]{1,64}, unique
	// within the provider; default its index in the list ("0", "1", ...,
	// set by [Parse]).
	settings.Upstream `yaml:",inline"`
	// URL is the base URL, with the same rules as [Provider.Upstream].
	URL string `yaml:"url"`
	// APIKeyEnv names the environment variable holding this upstream's
	// key; empty: the provider's api_key_env, if any.
	APIKeyEnv string `yaml:"api_key_env"`
	// Headers are set on every request to this upstream, over the
	// provider's.
	Headers map[string]string `yaml:"headers"`
	// APIKey is the key read from APIKeyEnv at load time.
	APIKey Secret `yaml:"-"`
}

// upstreams checks the upstreams: list of the provider at pp: each URL as
// upstream: is checked, names unique, keys resolved, headers checked with
// the provider's auth, and the limit-related part by its own Problems.
func (v *validator) upstreams(pp string, p *Provider) {
	if len(p.Upstreams) == 0 {
		return
	}
	lp := pp + ".upstreams"
	if len(p.Upstreams) > settings.MaxUpstreams {
		v.add(lp, "at most %d upstreams, got %d", settings.MaxUpstreams, len(p.Upstreams))
	}
	names := map[string]int{}
	for i := range p.Upstreams {
		u := &p.Upstreams[i]
		up := fmt.Sprintf("%s[%d]", lp, i)
		switch {
		case u.Name == "":
			v.add(up+".name", "required")
		case !nameRE.MatchString(u.Name):
			v.add(up+".name", "must be 1 to 64 characters of a-z, 0-9, _ and -, got %q", u.Name)
		default:
			if j, dup := names[u.Name]; dup {
				v.add(up+".name", "duplicate upstream name %q (also upstreams[%d])", u.Name, j)
			}
			names[u.Name] = i
		}
		v.upstream(up+".url", u.URL)
		v.resolveKey(up, u.APIKeyEnv, &u.APIKey)
		injected := u.APIKeyEnv != "" || u.APIKey != "" || p.APIKeyEnv != "" || p.APIKey != ""
		v.headers(up+".headers", u.Headers, injected, p.Auth)
		v.problems(up, u.Problems())
	}
}

// normalizeUpstreams gives unnamed upstreams their index as a name and
// removes a trailing "/" from their URLs, as normalize does for upstream:.
func normalizeUpstreams(p *Provider) {
	for i := range p.Upstreams {
		u := &p.Upstreams[i]
		if u.Name == "" {
			u.Name = strconv.Itoa(i)
		}
		if pu, err := url.Parse(u.URL); err == nil && pu.RawQuery == "" && !pu.ForceQuery && pu.Fragment == "" && pu.Host != "" {
			u.URL = strings.TrimRight(u.URL, "/")
		}
	}
}
