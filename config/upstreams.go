package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// maxUpstreams bounds a provider's upstreams: list.
const maxUpstreams = 64

// upstreams checks the upstreams: list of the provider at pp: each URL as
// upstream: is checked, names unique, keys resolved, headers checked with
// the provider's auth, and the adaptive part by the rules. Without
// Rules.SeveralUpstreams the list is rejected as not served (after
// being checked, so that every mistake in it is reported at once).
func (v *validator) upstreams(pp string, p *Provider) {
	if len(p.Upstreams) == 0 {
		return
	}
	lp := pp + ".upstreams"
	if len(p.Upstreams) > maxUpstreams {
		v.add(lp, "at most %d upstreams, got %d", maxUpstreams, len(p.Upstreams))
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
		v.rules.Upstream.check(v, up, *u)
	}
	if !v.rules.SeveralUpstreams {
		v.add(lp, "several upstreams per provider are not served by this binary; use upstream:")
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
