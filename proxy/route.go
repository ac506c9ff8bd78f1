package proxy

import (
	"bytes"
	"sort"
)

// route sends requests whose Host and path match to one provider.
type route struct {
	host   []byte // lowercase, no port; nil = any host
	prefix []byte // path prefix, stripped before forwarding; nil = none
	p      *provider
}

// router is built once per applied config and only read afterwards.
// Routes are ordered most specific first: a route with a host before one
// without, then longer prefixes first, so the first match wins.
type router struct {
	routes []route
}

func newRouter(rs []route) *router {
	sort.SliceStable(rs, func(i, j int) bool {
		hi, hj := rs[i].host != nil, rs[j].host != nil
		if hi != hj {
			return hi
		}
		return len(rs[i].prefix) > len(rs[j].prefix)
	})
	return &router{routes: rs}
}

// match returns the provider for host and the raw (undecoded) path, and
// the rest of the path after the route's prefix ("/" when nothing is
// left), still raw: it is what the upstream gets. The prefix matches whole
// segments, compared after %-decoding ("/f%61ke" matches "/fake"), but an
// encoded "/" never matches a "/" of the prefix. The request line's scheme
// and authority never take part: only configured upstreams are ever
// contacted.
func (r *router) match(host, path []byte) (*provider, []byte) {
	host = stripPort(host)
	for i := range r.routes {
		rt := &r.routes[i]
		if rt.host != nil && !bytes.EqualFold(host, rt.host) {
			continue
		}
		if rt.prefix == nil {
			return rt.p, path
		}
		n, ok := matchPrefix(path, rt.prefix)
		if !ok {
			continue
		}
		rest := path[n:]
		if len(rest) == 0 {
			return rt.p, slash
		}
		if rest[0] != '/' {
			continue // "/openai" must not match "/openaix"
		}
		return rt.p, rest
	}
	return nil, nil
}

// matchPrefix reports whether raw path starts with prefix (which holds no
// "%") once %-escapes other than an encoded "/" are decoded, and how many
// bytes of path the prefix spans.
func matchPrefix(path, prefix []byte) (int, bool) {
	if bytes.HasPrefix(path, prefix) {
		return len(prefix), true // the common case: nothing encoded
	}
	i := 0
	for j := 0; j < len(prefix); j++ {
		if i >= len(path) {
			return 0, false
		}
		c := path[i]
		i++
		if c == '%' && i+1 < len(path) {
			hi, lo := unhex(path[i]), unhex(path[i+1])
			if hi < 0 || lo < 0 {
				return 0, false
			}
			if c = byte(hi<<4 | lo); c == '/' {
				return 0, false
			}
			i += 2
		}
		if c != prefix[j] {
			return 0, false
		}
	}
	return i, true
}

var slash = []byte("/")

// stripPort removes ":port" from a Host value, keeping IPv6 brackets' content.
func stripPort(h []byte) []byte {
	if len(h) > 0 && h[0] == '[' {
		if i := bytes.IndexByte(h, ']'); i > 0 {
			return h[1:i]
		}
		return h
	}
	if i := bytes.LastIndexByte(h, ':'); i >= 0 {
		return h[:i]
	}
	return h
}
