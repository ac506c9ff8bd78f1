package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/settings"
)

// clientPolicy is one client policy of the clients: block as the request
// path reads it: the default policy (index 0) or an entry (index i+1).
// The per-provider parts (class ceiling, allowed, quota) are in each
// provider's policies, at the same index.
type clientPolicy struct {
	idx         int
	name        string // "" for the default policy
	tenant      uint64 // 0: the credential's own tenant
	maxInflight int
	refuse      bool
}

// providerPolicy is a client policy at one provider.
type providerPolicy struct {
	ceiling int  // index of the highest class the client may use
	allowed bool // the client may reach the provider
	quota   *adaptive.ClientQuota
}

// clientRules match a request to its client policy: by the SHA-256 of its
// credential, then by a trusted hop's header, else the default. Built when
// a config is applied; matching allocates nothing.
type clientRules struct {
	policies []*clientPolicy // [0] is the default
	byKey    map[[sha256.Size]byte]*clientPolicy
	headers  []headerRule
	// strip are the headers the rules read: set for Sluice by a hop in
	// front, never forwarded upstream.
	strip [][]byte
}

type headerRule struct {
	name, value []byte
	pol         *clientPolicy
}

func newClientRules(c settings.Clients) *clientRules {
	cr := &clientRules{byKey: map[[sha256.Size]byte]*clientPolicy{}}
	def := &clientPolicy{idx: 0, maxInflight: c.Default.MaxInflight, refuse: c.Default.Refuse}
	if c.Default.Tenant != "" {
		def.tenant = policyTenantID(c.Default.Tenant)
	}
	cr.policies = append(cr.policies, def)
	seen := map[string]bool{}
	for i, e := range c.Entries {
		pol := &clientPolicy{idx: i + 1, name: e.Name, tenant: policyTenantID(e.TenantName()), maxInflight: e.MaxInflight}
		cr.policies = append(cr.policies, pol)
		for _, h := range e.KeySHA256 {
			var sum [sha256.Size]byte
			if n, err := hex.Decode(sum[:], []byte(h)); err == nil && n == len(sum) {
				cr.byKey[sum] = pol
			}
		}
		if e.Header.Name != "" {
			cr.headers = append(cr.headers, headerRule{[]byte(e.Header.Name), []byte(e.Header.Value), pol})
			if low := strings.ToLower(e.Header.Name); !seen[low] {
				seen[low] = true
				cr.strip = append(cr.strip, []byte(e.Header.Name))
			}
		}
	}
	return cr
}

// policiesAt resolves every policy of c at provider p (its classes and
// its rate layer, where a policy with rpm/tpm gets its quota).
func policiesAt(c settings.Clients, p *provider) []providerPolicy {
	q := p.cfg.Queue
	limits := map[string]settings.PerMinute{"": c.Default.PerMinute}
	for _, e := range c.Entries {
		limits[e.Name] = e.PerMinute
	}
	quotas := p.adm.Rates.SetClientQuotas(limits)
	ceiling := func(maxClass string) int {
		if id := q.ClassID(maxClass); id > 0 {
			return int(id) - 1
		}
		return p.flows.def
	}
	out := make([]providerPolicy, 0, len(c.Entries)+1)
	out = append(out, providerPolicy{ceiling(c.Default.MaxClass), c.Default.Reaches(p.name), quotas[""]})
	for _, e := range c.Entries {
		out = append(out, providerPolicy{ceiling(e.MaxClass), e.Reaches(p.name), quotas[e.Name]})
	}
	return out
}

// identity is who a request comes from: its client policy and the
// SHA-256 of its credential (its key's tenant and its clients: match).
type identity struct {
	pol    *clientPolicy
	sum    [sha256.Size]byte
	hasKey bool
}

// identify fills id for the request headers h: one SHA-256 of the
// credential (when there is one), one map lookup, then the header rules.
func (cr *clientRules) identify(h *fasthttp.RequestHeader, id *identity) {
	id.pol = cr.policies[0]
	if k := credential(h); len(k) > 0 {
		id.sum, id.hasKey = sha256.Sum256(k), true
		if pol := cr.byKey[id.sum]; pol != nil {
			id.pol = pol
			return
		}
	}
	for i := range cr.headers {
		r := &cr.headers[i]
		if bytes.Equal(h.PeekBytes(r.name), r.value) {
			id.pol = r.pol
			return
		}
	}
}

// credential returns the client's API key: the Authorization bearer token
// (the header's whole value for another scheme), else x-api-key, without
// surrounding spaces; nil when there is none.
func credential(h *fasthttp.RequestHeader) []byte {
	v := h.PeekBytes(hdrAuthz)
	if len(v) > 0 {
		if len(v) > 7 && bytes.EqualFold(v[:7], []byte("bearer ")) {
			v = v[7:]
		}
	} else {
		v = h.PeekBytes(hdrXAPIKey)
	}
	return bytes.TrimSpace(v)
}

// policyTenantID is the tenant id of a tenant named in clients:. It is
// kept apart from the ids of credentials and tenant headers (TenantID):
// no key a client may send hashes to a configured tenant's id.
func policyTenantID(name string) uint64 {
	sum := sha256.Sum256([]byte(name))
	id := binary.BigEndian.Uint64(sum[:8]) ^ 0x9e3779b97f4a7c15
	if id == adaptive.AnonymousTenant || id == adaptive.OtherTenant {
		id = 2
	}
	return id
}

// tenantOfSum is TenantID of a key whose SHA-256 is sum.
func tenantOfSum(sum *[sha256.Size]byte) uint64 {
	id := binary.BigEndian.Uint64(sum[:8])
	if id == adaptive.AnonymousTenant || id == adaptive.OtherTenant {
		id = 1
	}
	return id
}
