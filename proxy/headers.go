package proxy

import (
	"net"

	"github.com/valyala/fasthttp"
)

// Hop-by-hop headers (RFC 9110 §7.6.1) are never forwarded in either
// direction, nor is anything the Connection header names.
var hopHeaders = [][]byte{
	[]byte("Connection"), []byte("Proxy-Connection"), []byte("Keep-Alive"),
	[]byte("Proxy-Authenticate"), []byte("Proxy-Authorization"), []byte("TE"),
	[]byte("Trailer"), []byte("Transfer-Encoding"), []byte("Upgrade"),
}

var (
	hdrXFF      = []byte("X-Forwarded-For")
	hdrAuthz    = []byte("Authorization")
	hdrXAPIKey  = []byte("x-api-key")
	hdrAcceptEn = []byte("Accept-Encoding")
	valIdentity = []byte("identity")
	commaSpace  = []byte(", ")
)

// buildUpstreamRequest fills st.req from the client request for upstream
// p: same method, headers minus hop-by-hop, the upstream's host and base
// path plus the raw path after the route prefix, the client's raw query,
// X-Forwarded-For, and the upstream's key when one is injected. It runs
// once per attempt.
func (s *Server) buildUpstreamRequest(ctx *fasthttp.RequestCtx, st *stream, p *upstream, rest, body []byte) {
	req := &st.req
	ctx.Request.Header.CopyTo(&req.Header)
	h := &req.Header
	removeHopHeaders(h, &ctx.Request.Header)
	if fr := st.prov.flows; fr != nil {
		for _, k := range fr.own {
			h.DelBytes(k)
		}
	}
	h.DelBytes(hdrXFF)
	if prior := ctx.Request.Header.PeekBytes(hdrXFF); len(prior) > 0 {
		h.SetBytesKV(hdrXFF, appendClientIP(append(append([]byte(nil), prior...), commaSpace...), ctx))
	} else {
		var buf [48]byte
		h.SetBytesKV(hdrXFF, appendClientIP(buf[:0], ctx))
	}
	// Streams are parsed as they pass: ask for them uncompressed.
	h.SetBytesKV(hdrAcceptEn, valIdentity)
	if p.authName != nil {
		h.DelBytes(hdrAuthz)
		h.DelBytes(hdrXAPIKey)
		h.SetBytesKV(p.authName, p.authValue)
	}
	for _, kv := range p.headers {
		h.SetBytesKV(kv[0], kv[1])
	}

	// The request line is built here, not through req.URI(): parsing the
	// client's request-URI would keep its userinfo (sent on as
	// Authorization: Basic) and decode its path. The upstream gets its base
	// path, then the rest of the path and the query exactly as the client
	// sent them.
	uri := append(st.uri[:0], p.basePath...)
	uri = append(uri, rest...)
	if q := ctx.URI().QueryString(); len(q) > 0 {
		uri = append(append(uri, '?'), q...)
	}
	st.uri = uri
	h.SetRequestURIBytes(uri)
	h.SetHostBytes(p.host)
	req.SetBodyRaw(body)
}

func removeHopHeaders(h *fasthttp.RequestHeader, from *fasthttp.RequestHeader) {
	// Headers named by Connection are hop-by-hop too.
	if c := from.Peek("Connection"); len(c) > 0 {
		forEachToken(c, func(name []byte) { h.DelBytes(name) })
	}
	for _, k := range hopHeaders {
		h.DelBytes(k)
	}
}

// copyResponseHeaders copies the upstream response status and headers to
// the client response, minus hop-by-hop ones.
func copyResponseHeaders(dst, src *fasthttp.ResponseHeader) {
	src.CopyTo(dst)
	// The status line is Sluice's (HTTP/1.1), whatever the upstream's
	// version: an HTTP/1.0 upstream must not make the client read a 1.0
	// answer with chunked framing.
	dst.SetProtocol(nil)
	if c := src.Peek("Connection"); len(c) > 0 {
		forEachToken(c, func(name []byte) { dst.DelBytes(name) })
	}
	for _, k := range hopHeaders {
		dst.DelBytes(k)
	}
	dst.ResetConnectionClose()
}

func forEachToken(v []byte, f func([]byte)) {
	start := 0
	for i := 0; i <= len(v); i++ {
		if i == len(v) || v[i] == ',' {
			tok := trimSpace(v[start:i])
			if len(tok) > 0 {
				f(tok)
			}
			start = i + 1
		}
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

func appendClientIP(dst []byte, ctx *fasthttp.RequestCtx) []byte {
	ip := ctx.RemoteIP()
	if ip4 := ip.To4(); ip4 != nil {
		return fasthttp.AppendIPv4(dst, ip4)
	}
	if ip == nil || ip.Equal(net.IPv4zero) {
		return append(dst, "unknown"...)
	}
	return append(dst, ip.String()...)
}
