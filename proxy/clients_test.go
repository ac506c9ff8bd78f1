package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/settings"
)

func keySHA(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// withClients sets the clients: block of a test config.
func withClients(c settings.Clients) func(*config.Config) {
	return func(cfg *config.Config) { cfg.Clients = c }
}

// TestForgedClassIsLowered (M1): a client's class header may lower its
// class, never raise it above what its policy allows: without a clients:
// entry that allows more, "interactive" counts as the default class, and
// a client whose entry allows interactive gets it.
func TestForgedClassIsLowered(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil), withClients(settings.Clients{Entries: []settings.Client{
		{Name: "chat-app", KeySHA256: []string{keySHA("sk-chat")}, ClientPolicy: settings.ClientPolicy{MaxClass: "interactive"}},
	}}))
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"
	send := func(key, class string) {
		t.Helper()
		if resp := post(t, c, url, map[string]string{"Authorization": "Bearer " + key, "X-Sluice-Class": class}); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s as %s: status %d", key, class, resp.StatusCode)
		} else {
			readAll(t, resp)
		}
	}
	send("sk-attacker", "interactive")
	send("sk-attacker", "batch")
	send("sk-chat", "interactive")
	cs := s.srv.limiters.Limiter("fake").Stats().Classes
	if cs[0].Admitted != 1 || cs[1].Admitted != 1 || cs[2].Admitted != 1 {
		t.Fatalf("admitted by class: interactive %d, standard %d, batch %d; want 1, 1, 1 (the unknown key's interactive counted as standard)",
			cs[0].Admitted, cs[1].Admitted, cs[2].Admitted)
	}
}

// TestForgedTenantHeaderIgnored (M2): a tenant header not declared as set
// by a trusted hop names no tenant: the request counts under its key, so
// a client cannot spend another's share. A clients: entry's tenant cannot
// be reached by sending its name as a key.
func TestForgedTenantHeaderIgnored(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) { p.Queue.TenantHeader = "X-Team" }),
		withClients(settings.Clients{Entries: []settings.Client{
			{Name: "science", KeySHA256: []string{keySHA("sk-science")}},
		}}))
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"
	for _, key := range []string{"sk-attacker", "science", "sk-science"} {
		readAll(t, post(t, c, url, map[string]string{"Authorization": "Bearer " + key, "X-Team": "victim"}))
	}
	got := map[uint64]bool{}
	for _, ts := range s.srv.limiters.Limiter("fake").Stats().Tenants {
		got[ts.Tenant] = true
	}
	switch {
	case got[TenantID([]byte("victim"))]:
		t.Fatal("a client named its tenant with an untrusted tenant header")
	case !got[TenantID([]byte("sk-attacker"))] || !got[TenantID([]byte("science"))]:
		t.Fatalf("unknown keys not counted under their own tenants: %v", got)
	case !got[policyTenantID("science")] || policyTenantID("science") == TenantID([]byte("science")):
		t.Fatalf("the clients: entry's tenant: %v", got)
	}
}

// TestTrustedTenantHeader: declared as set by a trusted hop, the tenant
// header names the tenant, as before.
func TestTrustedTenantHeader(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Queue.TenantHeader, p.Queue.TenantHeaderTrusted = "X-Team", true
	}))
	readAll(t, post(t, httpClient(), s.base+"/fake/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-a", "X-Team": "ml"}))
	for _, ts := range s.srv.limiters.Limiter("fake").Stats().Tenants {
		if ts.Tenant == TenantID([]byte("ml")) {
			return
		}
	}
	t.Fatal("the trusted tenant header was not honoured")
}

// TestClientPolicies: the default policy's refuse answers 401 in the
// provider's error format; a client reaches only its providers (403
// elsewhere); an entry's rpm is shared by all its keys (429
// rate_limit_client); a trusted hop's header matches an entry and is not
// forwarded.
func TestClientPolicies(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	cfg := testConfig(up.url(), nil)
	// A quota that has no room within the wait is refused, not waited for.
	cfg.Providers[0].Queue.MaxWait = time.Second
	p2 := cfg.Providers[0]
	p2.Name, p2.Match.PathPrefix = "fake2", "/fake2"
	cfg.Providers = append(cfg.Providers, p2)
	s := startSluice(t, cfg, withClients(settings.Clients{
		Default: settings.ClientPolicy{Refuse: true},
		Entries: []settings.Client{
			{Name: "team", KeySHA256: []string{keySHA("sk-team-1"), keySHA("sk-team-2")},
				ClientPolicy: settings.ClientPolicy{PerMinute: settings.PerMinute{RPM: 2}, Providers: []string{"fake"}}},
			{Name: "ops", Header: settings.ClientHeader{Name: "X-Gateway-Team", Value: "ops"}},
		},
	}))
	c := httpClient()
	check := func(path string, hdr map[string]string, status int, reason, inBody string) {
		t.Helper()
		resp := post(t, c, s.base+path, hdr)
		body := readAll(t, resp)
		got := resp.Header.Get(HeaderError) + resp.Header.Get(HeaderRejected)
		if resp.StatusCode != status || got != reason || !strings.Contains(body, inBody) {
			t.Fatalf("%s %v: %d %q %s, want %d %q with %q", path, hdr, resp.StatusCode, got, body, status, reason, inBody)
		}
	}
	check("/fake/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-stranger"}, http.StatusUnauthorized, "unknown_client", `"type":"invalid_request_error"`)
	check("/fake/v1/messages", map[string]string{"x-api-key": "sk-stranger"}, http.StatusUnauthorized, "unknown_client", `"type":"authentication_error"`)
	check("/fake/v1/chat/completions", nil, http.StatusUnauthorized, "unknown_client", "not one of the clients")
	check("/fake2/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-team-1"}, http.StatusForbidden, "provider_not_allowed", "may not use provider fake2")
	check("/fake/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-team-1"}, http.StatusOK, "", "")
	check("/fake/v1/chat/completions", map[string]string{"x-api-key": "sk-team-2"}, http.StatusOK, "", "")
	check("/fake/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-team-2"}, http.StatusTooManyRequests, "rate_limit_client", "")
	check("/fake2/v1/chat/completions", map[string]string{"X-Gateway-Team": "ops"}, http.StatusOK, "", "")
	up.mu.Lock()
	h := up.lastReq
	up.mu.Unlock()
	if v := h.Peek("X-Gateway-Team"); len(v) > 0 {
		t.Errorf("upstream got X-Gateway-Team: %q", v)
	}
}

// TestClientMaxInflight: an entry's max_inflight caps the permits its
// tenant holds, whatever the free capacity; other clients are served.
func TestClientMaxInflight(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), nil), withClients(settings.Clients{Entries: []settings.Client{
		{Name: "team", KeySHA256: []string{keySHA("sk-team")}, ClientPolicy: settings.ClientPolicy{MaxInflight: 1}},
	}}))
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"
	long := post(t, c, url, map[string]string{"Authorization": "Bearer sk-team", "x-events": "40", "x-gap": "25ms"})
	defer long.Body.Close()
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i, key := range []string{"sk-team", "sk-other"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, c, url, map[string]string{"Authorization": "Bearer " + key, "X-Sluice-Max-Wait": "200ms"})
			readAll(t, resp)
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	if codes[0] == http.StatusOK || codes[1] != http.StatusOK {
		t.Fatalf("with the team's one permit held: team got %d, another client %d; want a refusal and 200", codes[0], codes[1])
	}
}

// TestIdentifyDoesNotAllocate: matching a request to its client (one
// SHA-256 of its key, one map lookup, the header rules) allocates nothing.
func TestIdentifyDoesNotAllocate(t *testing.T) {
	var entries []settings.Client
	for i := range 1000 {
		entries = append(entries, settings.Client{Name: "c" + strings.Repeat("x", i%3) + string(rune('a'+i%26)), KeySHA256: []string{keySHA("sk-" + string(rune(i)))}})
	}
	entries = append(entries, settings.Client{Name: "hop", Header: settings.ClientHeader{Name: "X-Team", Value: "ops"}})
	cr := newClientRules(settings.Clients{Entries: entries})
	var h fasthttp.RequestHeader
	h.Set("Authorization", "Bearer sk-unknown-0123456789abcdef")
	var id identity
	if n := testing.AllocsPerRun(100, func() { cr.identify(&h, &id) }); n != 0 {
		t.Fatalf("identify allocates %v times", n)
	}
}

// TestClientsReload: the clients: block is applied by a reload like the
// rest, and a policy's spent quota carries over while its entry keeps
// its name.
func TestClientsReload(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	team := settings.Client{Name: "team", KeySHA256: []string{keySHA("sk-team")},
		ClientPolicy: settings.ClientPolicy{PerMinute: settings.PerMinute{RPM: 1}}}
	cfg := testConfig(up.url(), nil)
	cfg.Providers[0].Queue.MaxWait = time.Second // a spent quota is refused, not waited for
	cfg.Clients = settings.Clients{Default: settings.ClientPolicy{Refuse: true}, Entries: []settings.Client{team}}
	s := startSluice(t, cfg)
	c := httpClient()
	url := s.base + "/fake/v1/chat/completions"
	status := func(key string) int {
		t.Helper()
		resp := post(t, c, url, map[string]string{"Authorization": "Bearer " + key})
		readAll(t, resp)
		return resp.StatusCode
	}
	if a, b, n := status("sk-team"), status("sk-team"), status("sk-new"); a != 200 || b != 429 || n != 401 {
		t.Fatalf("before the reload: team %d then %d, new key %d; want 200, 429, 401", a, b, n)
	}
	next := testConfig(up.url(), nil)
	next.Providers[0].Queue.MaxWait = time.Second
	next.Clients = settings.Clients{Entries: []settings.Client{team,
		{Name: "new", KeySHA256: []string{keySHA("sk-new")}}}}
	if err := s.srv.Apply(next); err != nil {
		t.Fatal(err)
	}
	if a, n, o := status("sk-team"), status("sk-new"), status("sk-other"); a != 429 || n != 200 || o != 200 {
		t.Fatalf("after the reload: team %d, new key %d, another %d; want 429 (its quota still spent), 200, 200", a, n, o)
	}
}

// TestRotatedKeysGainNothing (M3): a client that sends each request with
// a new key, against rate.per_client limits with a full table, gets what
// the tracked keys and the overflow quota hold, not a fresh quota per
// key: evicting a key whose quota is spent would forgive it.
func TestRotatedKeysGainNothing(t *testing.T) {
	t.Parallel()
	up := newFakeUpstream(t)
	s := startSluice(t, testConfig(up.url(), func(p *config.Provider) {
		p.Rate.PerClient.PerMinute = settings.PerMinute{RPM: 1}
		p.Rate.PerClient.MaxKeys = 2
		p.Queue.MaxWait = 0
	}))
	c := httpClient()
	ok := 0
	for i := range 20 {
		resp := post(t, c, s.base+"/fake/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-rotated-" + string(rune('a'+i))})
		readAll(t, resp)
		if resp.StatusCode == http.StatusOK {
			ok++
		}
	}
	if ok > 3 {
		t.Fatalf("20 requests with 20 new keys, 1 per minute each, 2 keys tracked: %d served, want at most 3 (two entries and the overflow)", ok)
	}
}
