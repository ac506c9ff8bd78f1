package admin

import (
	"encoding/base64"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/proxy"
)

// With a token, the admin endpoints need it (bearer, or as the Basic
// password a browser sends); the probes stay open; a wrong, truncated or
// extended token, another scheme or none gets 401 with both challenges.
func TestAdminToken(t *testing.T) {
	t.Parallel()
	const token = "0123456789abcdef-admin"
	srv := proxy.New(proxy.Options{})
	cfg := config.Default()
	p := config.DefaultProvider()
	p.Name, p.Upstream, p.Match.PathPrefix = "fake", "http://127.0.0.1:1", "/fake"
	cfg.Providers = []config.Provider{p}
	if err := srv.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	h := Handler(srv, Options{Registry: NewRegistry(), Token: token})
	do := func(path, auth string) *fasthttp.RequestCtx {
		var ctx fasthttp.RequestCtx
		ctx.Request.SetRequestURI(path)
		if auth != "" {
			ctx.Request.Header.Set("Authorization", auth)
		}
		h(&ctx)
		return &ctx
	}
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if c := do(path, "").Response.StatusCode(); c != 200 {
			t.Errorf("%s without token: %d, want 200 (probes stay open)", path, c)
		}
	}
	for _, path := range []string{"/admin/status", "/metrics", "/admin/", "/admin/history", "/nope"} {
		for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer " + token[:len(token)-1], "Bearer " + token + "x",
			"Token " + token, basic("admin", "wrong"), "Basic !!!", basic(token, "")} {
			ctx := do(path, auth)
			if c := ctx.Response.StatusCode(); c != fasthttp.StatusUnauthorized {
				t.Errorf("%s with %q: %d, want 401", path, auth, c)
				continue
			}
			var challenges []string
			for _, v := range ctx.Response.Header.PeekAll("WWW-Authenticate") {
				challenges = append(challenges, string(v))
			}
			if len(challenges) != 2 {
				t.Errorf("%s: WWW-Authenticate %q, want a Bearer and a Basic challenge", path, challenges)
			}
		}
	}
	for _, auth := range []string{"Bearer " + token, "bearer  " + token, basic("", token), basic("me", token)} {
		if c := do("/admin/status", auth).Response.StatusCode(); c != 200 {
			t.Errorf("/admin/status with %q: %d, want 200", auth, c)
		}
	}
	if c := do("/nope", "Bearer "+token).Response.StatusCode(); c != 404 {
		t.Errorf("/nope with the token: %d, want 404", c)
	}
	// Without a token nothing is guarded (loopback default).
	open := Handler(srv, Options{})
	var ctx fasthttp.RequestCtx
	ctx.Request.SetRequestURI("/admin/status")
	open(&ctx)
	if c := ctx.Response.StatusCode(); c != 200 {
		t.Errorf("no token configured: %d, want 200", c)
	}
}
