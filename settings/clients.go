package settings

import (
	"fmt"
	"regexp"
	"strings"
)

// Clients is who the proxy's clients are and what each may do (the
// top-level clients: block). Each entry matches a credential by the
// SHA-256 of its API key, or a header set by a trusted hop in front of
// Sluice, and attaches a policy to it: its tenant, the highest class it
// may ask for, its rate limits, its concurrency cap and the providers it
// may reach. A credential no entry matches gets Default.
//
// Without a clients: block (Configured false) every credential gets the
// zero Default: its tenant is its key, its class at most the queue's
// default_class, no limit of its own.
type Clients struct {
	// Default is the policy of a credential no entry matches.
	Default ClientPolicy `yaml:"default"`
	// Entries are the known clients, matched in order: by key first (any
	// entry), then by header (the first entry whose header matches).
	Entries []Client `yaml:"entries"`
}

// Client is one known client (an entry of clients.entries).
type Client struct {
	// Name identifies the client in logs, metrics and errors: 1..64
	// characters of a-z, 0-9, _ and -, unique. It is also the client's
	// tenant unless Tenant is set.
	Name string `yaml:"name"`
	// KeySHA256 are the hex SHA-256 digests of the client's API keys (the
	// bearer token, or the x-api-key value, exactly as sent): `sluice
	// hash-key` prints one. All keys of an entry share its limits. The key
	// itself is never written in the file.
	KeySHA256 []string `yaml:"key_sha256"`
	// Header matches the client by a header that a trusted hop in front
	// of Sluice sets (and strips from what clients send). A client could
	// send it itself if nothing in front overwrites it: configure it only
	// behind such a hop. Sluice removes it before the upstream.
	Header ClientHeader `yaml:"header"`
	// ClientPolicy is what the client may do.
	ClientPolicy `yaml:",inline"`
}

// ClientHeader is a header name and the value that identifies a client.
type ClientHeader struct {
	// Name is the header's name (an HTTP token, case-insensitive).
	Name string `yaml:"name"`
	// Value is the header's exact value (case-sensitive).
	Value string `yaml:"value"`
}

// ClientPolicy is what a client may do. Its zero value is no restriction
// beyond the queue's own rules.
type ClientPolicy struct {
	// Tenant names the client's tenant in the fair queue; clients that
	// name the same tenant share its fair share and its MaxInflight. ""
	// means the entry's Name; for the default policy, each credential is
	// its own tenant (a hash of its key).
	Tenant string `yaml:"tenant"`
	// MaxClass is the highest class the client may use: its class header
	// may ask for this class or a lower one, never a higher. "" means the
	// queue's default_class. It must be a class of every provider the
	// client may reach.
	MaxClass string `yaml:"max_class"`
	// PerMinute are the client's rate limits at each provider (all its
	// keys together), counted like rate.per_client over the provider's
	// rate.request_window. All 0 (the default): none. For the default
	// policy, every unknown credential shares one quota.
	PerMinute `yaml:",inline"`
	// MaxInflight caps the permits the client's tenant holds at once at
	// each provider, instead of queue.tenant_max_inflight. 0 (the
	// default): that queue setting. 0..MaxCeiling.
	MaxInflight int `yaml:"max_inflight"`
	// Providers, when set, are the only providers the client may reach;
	// others answer 403. Empty: every provider.
	Providers []string `yaml:"providers"`
	// Refuse answers every request of the client with 401 in the
	// provider's error format, before its body is read. Only for the
	// default policy: with it, only credentials listed in entries get in.
	Refuse bool `yaml:"refuse"`
}

var (
	clientNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	sha256HexRE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Problems lists every invalid clients setting on its own (the names of
// classes and providers are checked against the providers by the
// config). Key is the key inside the clients: block ("entries[1].rpm").
func (c Clients) Problems() []Problem {
	var ps problems
	c.Default.problems(&ps, "default.")
	names := map[string]int{}
	keys := map[string]int{}
	headers := map[string]int{}
	tenantCaps := map[string]int{} // tenant -> index of the first entry naming it
	for i, e := range c.Entries {
		p := fmt.Sprintf("entries[%d].", i)
		switch j, dup := names[e.Name]; {
		case !clientNameRE.MatchString(e.Name):
			ps.bad(p+"name", "must be 1 to 64 characters of a-z, 0-9, _ and -, got %q", e.Name)
		case dup:
			ps.bad(p+"name", "duplicate client %q (also entries[%d])", e.Name, j)
		default:
			names[e.Name] = i
		}
		for k, h := range e.KeySHA256 {
			kp := fmt.Sprintf("%skey_sha256[%d]", p, k)
			switch j, dup := keys[h]; {
			case !sha256HexRE.MatchString(h):
				// Not echoed: a key pasted here by mistake must not reach the logs.
				ps.bad(kp, "must be 64 lower-case hex digits, the SHA-256 of the key (`sluice hash-key` prints it), not the key itself")
			case dup:
				ps.bad(kp, "the same key is already listed by entries[%d]", j)
			default:
				keys[h] = i
			}
		}
		switch h := e.Header; {
		case h.Name == "" && h.Value == "":
			if len(e.KeySHA256) == 0 {
				ps.bad(p+"key_sha256", "an entry matches clients by key_sha256, header, or both; it has neither")
			}
		case !IsToken(h.Name):
			ps.bad(p+"header.name", "must be a header name (an HTTP token), got %q", h.Name)
		case h.Value == "" || hasCTL(h.Value):
			ps.bad(p+"header.value", "must be a non-empty header value without control characters")
		default:
			hk := strings.ToLower(h.Name) + "\x00" + h.Value
			if j, dup := headers[hk]; dup {
				ps.bad(p+"header", "the same header and value already match entries[%d]", j)
			} else {
				headers[hk] = i
			}
		}
		e.ClientPolicy.problems(&ps, p)
		if e.Refuse {
			ps.bad(p+"refuse", "only the default policy refuses; remove the entry to refuse its keys")
		}
		t := e.TenantName()
		if j, seen := tenantCaps[t]; seen && c.Entries[j].MaxInflight != e.MaxInflight {
			ps.bad(p+"max_inflight", "entries of one tenant (%q) share its cap and must agree: entries[%d] has %d, got %d", t, j, c.Entries[j].MaxInflight, e.MaxInflight)
		} else if !seen {
			tenantCaps[t] = i
		}
	}
	return ps
}

func (cp ClientPolicy) problems(ps *problems, prefix string) {
	if cp.Tenant != "" && !clientNameRE.MatchString(cp.Tenant) {
		ps.bad(prefix+"tenant", "must be 1 to 64 characters of a-z, 0-9, _ and -, got %q", cp.Tenant)
	}
	if cp.MaxClass != "" && !classNameRE.MatchString(cp.MaxClass) {
		ps.bad(prefix+"max_class", "must be a class name (1 to 32 characters of a-z, 0-9, _ and -), got %q", cp.MaxClass)
	}
	ps.perMinute(prefix, cp.PerMinute)
	if cp.MaxInflight < 0 || cp.MaxInflight > MaxCeiling {
		ps.bad(prefix+"max_inflight", "must be between 0 (the queue's tenant_max_inflight) and %d, got %d", MaxCeiling, cp.MaxInflight)
	}
	seen := map[string]bool{}
	for i, name := range cp.Providers {
		if seen[name] {
			ps.bad(fmt.Sprintf("%sproviders[%d]", prefix, i), "duplicate provider %q", name)
		}
		seen[name] = true
	}
}

// TenantName is the tenant an entry's requests count under: its Tenant,
// else its Name.
func (e Client) TenantName() string {
	if e.Tenant != "" {
		return e.Tenant
	}
	return e.Name
}

// Reaches reports whether a client of the policy may reach provider.
func (cp ClientPolicy) Reaches(provider string) bool {
	if len(cp.Providers) == 0 {
		return true
	}
	for _, p := range cp.Providers {
		if p == provider {
			return true
		}
	}
	return false
}

func hasCTL(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}
