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

// match returns the provider for host and path and the path with the route's
// prefix stripped ("/" when nothing is left). The request line's scheme and
// authority never take part: only configured upstreams are ever contacted.
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
		if !bytes.HasPrefix(path, rt.prefix) {
			continue
		}
		rest := path[len(rt.prefix):]
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
