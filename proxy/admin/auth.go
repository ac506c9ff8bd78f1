package admin

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/config"
)

// openPaths are served without the token: orchestrators probe them and
// cannot be given one, and they tell nothing but up and ready.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true}

// requireToken guards h with token. A request is let through when it
// carries "Authorization: Bearer TOKEN" (Prometheus' authorization block,
// curl -H), or Basic credentials whose password is TOKEN, any user name
// (a browser asks for them on the status page's 401 and then sends them
// with the page's own requests). Tokens are compared as SHA-256 digests in
// constant time, so neither the content nor the length of the token leaks
// through timing. Anything else gets 401 with both challenges.
func requireToken(token config.Secret, h fasthttp.RequestHandler) fasthttp.RequestHandler {
	want := sha256.Sum256([]byte(token))
	return func(ctx *fasthttp.RequestCtx) {
		if openPaths[string(ctx.Path())] || authorized(ctx.Request.Header.Peek("Authorization"), &want) {
			h(ctx)
			return
		}
		ctx.Response.Header.Add("WWW-Authenticate", `Bearer realm="sluice admin"`)
		ctx.Response.Header.Add("WWW-Authenticate", `Basic realm="sluice admin", charset="UTF-8"`)
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetStatusCode(fasthttp.StatusUnauthorized)
		ctx.SetBodyString("unauthorized: this admin listener requires its token (admin.token_env)\n")
	}
}

// authorized reports whether the Authorization header value carries the
// token whose digest is want.
func authorized(auth []byte, want *[sha256.Size]byte) bool {
	scheme, cred, ok := bytes.Cut(auth, []byte(" "))
	if !ok {
		return false
	}
	cred = bytes.TrimLeft(cred, " ")
	switch {
	case bytes.EqualFold(scheme, []byte("Bearer")):
	case bytes.EqualFold(scheme, []byte("Basic")):
		dec, err := base64.StdEncoding.AppendDecode(nil, cred)
		if err != nil {
			return false
		}
		_, pass, ok := bytes.Cut(dec, []byte(":"))
		if !ok {
			return false
		}
		cred = pass
	default:
		return false
	}
	got := sha256.Sum256(cred)
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}
