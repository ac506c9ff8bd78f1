package proxy

import (
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/config"
)

// passthroughOf reports whether an upstream of pc gets the client's own
// credentials (no key injected): each client's key is then its own
// account at the provider, with its own quota.
func passthroughOf(pc *config.Provider, uc *config.Upstream) bool {
	return uc.APIKey == "" && pc.APIKey == ""
}

// quotaKeyOf names the provider's quota a request spends: its account
// (in passthrough mode, a keyed hash of the credential it sends:
// Authorization, else x-api-key; never the key itself) and the model it
// names. It reads the headers only when an upstream is passthrough, and
// hashes nothing when the provider's headers are not followed (nothing is
// learned per account or model then). It does not allocate.
func (p *provider) quotaKeyOf(h *fasthttp.RequestHeader, model string) adaptive.QuotaKey {
	var k adaptive.QuotaKey
	if !p.adm.Upstreams.Follow() {
		return k
	}
	if p.passthrough {
		cred := h.PeekBytes(hdrAuthz)
		if len(cred) == 0 {
			cred = h.PeekBytes(hdrXAPIKey)
		}
		k.Account = keyHasher.Sum(cred)
	}
	k.Model = keyHasher.SumString(model)
	return k
}
