package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// Validate checks a Config built or changed in code against the same rules
// [Parse] applies (ranges, relations, uniqueness, URL and header syntax).
// It does not read the environment: a
// provider whose APIKeyEnv is set must already carry its APIKey. It fills
// in no defaults (start from [Default] and [DefaultProvider]). Errors have
// no file or line: "providers[0].limit.ceiling: must be between 1 and
// 100000, got 0".
func (c *Config) Validate() error {
	v := &validator{}
	v.config(c)
	if len(v.errs) == 0 {
		return nil
	}
	errs := make([]error, len(v.errs))
	for i, e := range v.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// validator collects rule violations by field path. With a lookup it is
// loading a file and resolves api_key_env into APIKey; without one it is
// Validate, and only checks that APIKey is present.
type validator struct {
	lookup func(string) (string, bool)
	errs   []*FieldError
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// problems reports the problems of a settings block at path (e.g.
// "providers[0].limit"), each under its key inside the block.
func (v *validator) problems(path string, ps []settings.Problem) {
	for _, p := range ps {
		v.add(path+"."+p.Key, "%s", p.Msg)
	}
}

func (v *validator) config(c *Config) {
	v.listenAddr("listen", c.Listen)
	if c.Admin.Listen != AdminOff {
		v.listenAddr("admin.listen", c.Admin.Listen)
		if c.Admin.Listen != "" && c.Admin.Listen == c.Listen {
			v.add("admin.listen", "must differ from listen (%q)", c.Listen)
		}
	}
	v.adminToken(&c.Admin)
	v.tls(&c.TLS)
	v.durRange("shutdown.grace", c.Shutdown.Grace, 0, time.Hour)
	v.server(c.Server)

	switch c.Tracing.Exporter {
	case "", "none", "otlp", "console":
	default:
		v.add("tracing.exporter", `must be "none", "otlp" or "console" (or absent to use OTEL_TRACES_EXPORTER), got %q`, c.Tracing.Exporter)
	}
	if r := c.Tracing.SampleRatio; r != SampleRatioUnset && !(r >= 0 && r <= 1) {
		v.add("tracing.sample_ratio", "must be between 0 and 1 (or -1 to use the environment), got %v", r)
	}

	if len(c.Providers) == 0 {
		v.add("providers", "at least one provider is required")
	}
	v.cluster(c)
	v.clients(c)
	names := map[string]int{}
	prefixes := map[string]int{}
	hosts := map[string]int{} // providers matched by host alone
	for i := range c.Providers {
		p := &c.Providers[i]
		pp := fmt.Sprintf("providers[%d]", i)
		v.provider(pp, p)

		if p.Name != "" {
			if j, dup := names[p.Name]; dup {
				v.add(pp+".name", "duplicate provider name %q (also providers[%d])", p.Name, j)
			} else {
				names[p.Name] = i
			}
		}
		if pre := p.Match.PathPrefix; pre != "" {
			if j, dup := prefixes[pre]; dup {
				v.add(pp+".match.path_prefix", "%q is already used by providers[%d] (%s)", pre, j, c.Providers[j].Name)
			} else {
				prefixes[pre] = i
			}
		} else if h := p.Match.Host; h != "" {
			if j, dup := hosts[h]; dup {
				v.add(pp+".match.host", "%q is already matched by providers[%d] (%s) with no path_prefix", h, j, c.Providers[j].Name)
			} else {
				hosts[h] = i
			}
		}
	}
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	envVarRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (v *validator) provider(pp string, p *Provider) {
	switch {
	case p.Name == "":
		v.add(pp+".name", "required")
	case !nameRE.MatchString(p.Name):
		v.add(pp+".name", "must be 1 to 64 characters of a-z, 0-9, _ and -, got %q", p.Name)
	}
	if len(p.Upstreams) == 0 {
		v.upstream(pp+".upstream", p.Upstream)
	} else if p.Upstream != "" {
		v.add(pp+".upstreams", "set upstream or upstreams, not both")
	}
	v.match(pp+".match", p.Match)

	switch p.Dialect {
	case DialectAuto, DialectOpenAI, DialectAnthropic:
	default:
		v.add(pp+".dialect", `must be "auto", "openai" or "anthropic", got %q`, p.Dialect)
	}
	switch p.Auth {
	case AuthBearer, AuthXAPIKey:
	default:
		v.add(pp+".auth", `must be "bearer" or "x-api-key", got %q`, p.Auth)
	}
	v.apiKey(pp, p)
	v.headers(pp+".headers", p.Headers, p.APIKeyEnv != "" || p.APIKey != "", p.Auth)
	v.upstreamTLS(pp, p)
	v.timeouts(pp+".timeouts", p.Timeouts)
	v.problems(pp+".limit", p.Limit.Problems())
	v.problems(pp+".queue", p.Queue.Problems())
	v.problems(pp+".rate", p.Rate.Problems())
	v.problems(pp+".retries", p.Retries.Problems())
	v.problems(pp+".breaker", p.Breaker.Problems())
	v.upstreams(pp, p)
}

// apiKey resolves (when loading) or checks (Validate) the injected key. The
// key's value never appears in a message.
func (v *validator) apiKey(pp string, p *Provider) {
	v.resolveKey(pp, p.APIKeyEnv, &p.APIKey)
}

// resolveKey resolves or checks the key named by env (the api_key_env of
// the block at path) into key.
func (v *validator) resolveKey(pp, env string, key *Secret) {
	path := pp + ".api_key_env"
	if env == "" {
		// No injection configured; a hand-built config may still set APIKey.
	} else if !envVarRE.MatchString(env) {
		// Not echoed: a key pasted here by mistake must not reach the logs.
		v.add(path, "must be the name of an environment variable (letters, digits and _, not starting with a digit), not the key itself")
		return
	} else if v.lookup != nil {
		val, ok := v.lookup(env)
		switch {
		case !ok:
			v.add(path, "%s is not set", envVarName(env))
			return
		case val == "":
			v.add(path, "%s is empty", envVarName(env))
			return
		}
		*key = Secret(val)
	} else if *key == "" {
		v.add(path, "APIKey is empty: %s was not resolved", envVarName(env))
		return
	}
	if hasCTL(string(*key), false) {
		if env != "" {
			v.add(path, "%s holds control characters (a trailing newline?); they cannot be sent in a header", envVarName(env))
		} else {
			v.add(pp, "APIKey holds control characters; they cannot be sent in a header")
		}
	}
}

func (v *validator) listenAddr(path, addr string) {
	if addr == "" {
		v.add(path, "required (host:port)")
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(path, "must be host:port (e.g. 127.0.0.1:8080 or :8080), got %q", addr)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.add(path, "port must be a number between 0 and 65535, got %q", port)
	}
}

func (v *validator) upstream(path, s string) {
	if s == "" {
		v.add(path, "required (an absolute http:// or https:// URL)")
		return
	}
	// Messages never echo the URL: it may hold credentials by mistake.
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		v.add(path, "invalid URL: %v", err)
		return
	}
	switch {
	case u.Scheme == "":
		v.add(path, "must be an absolute URL starting with http:// or https://")
		return
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(path, "scheme must be http or https, got %q", u.Scheme)
		return
	case u.Opaque != "" || u.Host == "":
		v.add(path, "must have a host, e.g. https://api.openai.com")
		return
	}
	if u.User != nil {
		v.add(path, "must not contain userinfo (user:password@); use api_key_env or headers")
	}
	if u.Hostname() == "" {
		v.add(path, "must have a host, e.g. https://api.openai.com")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			v.add(path, "port must be between 1 and 65535, got %q", port)
		}
	}
	if u.RawQuery != "" || u.ForceQuery {
		v.add(path, "must not have a query (?...)")
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		v.add(path, "must not have a fragment (#...)")
	}
	if strings.HasSuffix(u.EscapedPath(), "/") {
		v.add(path, `must not end with "/"`)
	}
}

// pathChars are the characters allowed in a path prefix besides "/":
// RFC 3986 unreserved, sub-delims, ":" and "@". "%" is excluded so that a
// prefix has exactly one spelling.
const pathChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:@"

func (v *validator) match(path string, m Match) {
	if m.PathPrefix == "" && m.Host == "" {
		v.add(path, "path_prefix or host is required")
	}
	if pre := m.PathPrefix; pre != "" {
		pp := path + ".path_prefix"
		switch {
		case !strings.HasPrefix(pre, "/"):
			v.add(pp, `must start with "/", got %q`, pre)
		case pre == "/":
			v.add(pp, `must not be "/"; to send every path to this provider, match on host alone`)
		case strings.HasSuffix(pre, "/"):
			v.add(pp, `must not end with "/", got %q`, pre)
		default:
			for seg := range strings.SplitSeq(pre[1:], "/") {
				if seg == "" || seg == "." || seg == ".." {
					v.add(pp, `must not contain empty, "." or ".." segments, got %q`, pre)
					return
				}
				if strings.Trim(seg, pathChars) != "" {
					v.add(pp, "must contain only letters, digits, \"/\" and -._~!$&'()*+,;=:@, got %q", pre)
					return
				}
			}
		}
	}
	if h := m.Host; h != "" {
		hp := path + ".host"
		switch {
		case h != strings.ToLower(h):
			v.add(hp, "must be lower case, got %q", h)
		case strings.HasPrefix(h, "["):
			v.add(hp, "must be an IPv6 address without brackets, got %q", h)
		case !validHost(h):
			v.add(hp, "must be a host name or IP address without port, got %q", h)
		}
	}
}

// validHost accepts DNS names (letters, digits, "-", "_"; labels of 1..63;
// no trailing dot), IPv4 addresses and IPv6 addresses without brackets (the
// proxy strips the port and brackets of the request's Host before comparing).
func validHost(h string) bool {
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		return err == nil && a.Is6() && a.Zone() == ""
	}
	if len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if len(label) == 0 || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return false
		}
	}
	return true
}

// forbiddenHeaders are set by the proxy or describe one connection only.
var forbiddenHeaders = map[string]string{
	"connection":        "hop-by-hop header",
	"keep-alive":        "hop-by-hop header",
	"transfer-encoding": "hop-by-hop header",
	"upgrade":           "hop-by-hop header",
	"te":                "hop-by-hop header",
	"trailer":           "hop-by-hop header",
	"host":              "the proxy sets Host from upstream",
	"content-length":    "the proxy sets Content-Length from the body",
}

// headers checks the headers map at path. injected says an API key is
// injected with auth, so its header may not be set here too.
func (v *validator) headers(path string, headers map[string]string, injected bool, auth string) {
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	sort.Strings(names)
	seen := map[string]string{}
	for _, name := range names {
		hp := joinKey(path, name)
		lower := strings.ToLower(name)
		switch {
		case !settings.IsToken(name):
			v.add(hp, "header name must be an HTTP token (letters, digits and !#$%%&'*+-.^_`|~)")
			continue
		case forbiddenHeaders[lower] != "":
			v.add(hp, "cannot be set: %s", forbiddenHeaders[lower])
			continue
		case strings.HasPrefix(lower, "proxy-"):
			v.add(hp, "cannot be set: hop-by-hop header (Proxy-*)")
			continue
		}
		if first, dup := seen[lower]; dup {
			v.add(hp, "same header as %q (header names are case-insensitive)", first)
			continue
		}
		seen[lower] = name
		if injected {
			if (auth == AuthBearer && lower == "authorization") || (auth == AuthXAPIKey && lower == "x-api-key") {
				v.add(hp, "conflicts with the API key injected from api_key_env (auth: %s)", auth)
			}
		}
		if hasCTL(headers[name], true) {
			v.add(hp, "value must not contain control characters (CR, LF, NUL, ...)")
		}
	}
}

// hasCTL reports ASCII control characters (and DEL); tab is allowed if allowTab.
func hasCTL(s string, allowTab bool) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && !(allowTab && c == '\t')) || c == 0x7f {
			return true
		}
	}
	return false
}

func (v *validator) timeouts(path string, t Timeouts) {
	v.durRange(path+".connect", t.Connect, time.Millisecond, 5*time.Minute)
	v.durRange(path+".first_token", t.FirstToken, time.Millisecond, time.Hour)
	v.durRange(path+".idle", t.Idle, time.Millisecond, time.Hour)
	v.durRange(path+".total", t.Total, time.Millisecond, 24*time.Hour)
	if t.Total > 0 && t.FirstToken > 0 && t.Total < t.FirstToken {
		v.add(path+".total", "must be at least first_token (%s), got %s", settings.FormatDuration(t.FirstToken), settings.FormatDuration(t.Total))
	}
}

func (v *validator) durRange(path string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		v.add(path, "must be between %s and %s, got %s", settings.FormatDuration(lo), settings.FormatDuration(hi), settings.FormatDuration(d))
	}
}
