package proxy

import (
	"github.com/valyala/fasthttp"
)

// allowedMethods is the Allow header of 405 and OPTIONS answers: the
// methods provider APIs use. POST creates (completions, messages, files,
// batches, and OpenAI's updates, which are POSTs too); GET reads (models,
// files, batches, stored responses); DELETE removes (files, batches,
// fine-tuned models, stored responses); HEAD is a GET without a body.
// OPTIONS is answered by Sluice: provider APIs serve no CORS, and a
// preflight must not cost a permit. Anything else, TRACE and CONNECT
// included, never reaches an upstream (nor the key Sluice injects).
const allowedMethods = "GET, HEAD, POST, DELETE, OPTIONS"

// checkRequest decides, from the request line alone, whether a routed
// request may go on to admission: its method is forwarded, and the path
// after the route prefix (rest, as the client sent it) means the same to
// every reader. Otherwise it returns the outcome to end with.
func checkRequest(ctx *fasthttp.RequestCtx, rest []byte) (outcome, bool) {
	h := &ctx.Request.Header
	switch {
	case h.IsPost(), h.IsGet(), h.IsHead(), h.IsDelete():
	case h.IsOptions():
		return outOptions, false
	default:
		return outMethodNotAllowed, false
	}
	if !unambiguousPath(rest) {
		return outBadPath, false
	}
	return 0, true
}

// requestPath is the request's path as the client sent it: not decoded,
// not cleaned, without the query ("/" when empty, as in "http://host").
func requestPath(ctx *fasthttp.RequestCtx) []byte {
	if p := ctx.Request.URI().PathOriginal(); len(p) > 0 {
		return p
	}
	return slash
}

// unambiguousPath reports whether the raw path p means the same whoever
// decodes it, and how many times: Sluice forwards it byte for byte, so it
// refuses what an upstream, or a hop in front of it, could read as another
// path. Refused: an encoded "/" or "\" (a segment boundary for some
// readers only), a raw "\", control characters raw or encoded (NUL
// included), "." and ".." segments in any spelling ("%2e%2E"), and "%" not
// followed by two hex digits. "%25" stays "%25": decoded once it is a
// literal "%", never a second escape. A segment's name is what precedes
// its parameters (";" or "%3B"), which servlet containers strip before
// resolving dot segments: "..;x" is "..", so a name that is empty, "."
// or ".." is refused whatever follows it. So is an empty segment ("//"),
// which some servers merge into one "/"; a trailing "/" is not one.
// The bytes 0xC0 and 0xC1, raw or encoded, which only begin overlong
// UTF-8 (an old spelling of "." and "/"), are refused too.
func unambiguousPath(p []byte) bool {
	dots, segLen := 0, 0 // of the current segment's name, decoded
	params := false      // the current segment has parameters
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '/':
			if i > 0 && !namedSegment(dots, segLen) {
				return false
			}
			dots, segLen, params = 0, 0, false
			continue
		case c == '%':
			if i+2 >= len(p) {
				return false
			}
			hi, lo := unhex(p[i+1]), unhex(p[i+2])
			if hi < 0 || lo < 0 {
				return false
			}
			c = byte(hi<<4 | lo)
			if c == '/' || c == '\\' || c < 0x20 || c == 0x7f || c == 0xc0 || c == 0xc1 {
				return false
			}
			i += 2
		case c == '\\' || c < 0x21 || c == 0x7f || c == 0xc0 || c == 0xc1:
			return false
		}
		switch {
		case params:
		case c == ';':
			params = true
		default:
			segLen++
			if c == '.' {
				dots++
			}
		}
	}
	return namedSegment(dots, segLen) || (segLen == 0 && !params)
}

// namedSegment reports whether a segment whose name (decoded, before any
// parameters) has segLen bytes, dots of them ".", names something: it is
// not empty, "." or "..".
func namedSegment(dots, segLen int) bool {
	return segLen > 0 && (dots < segLen || segLen > 2)
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
