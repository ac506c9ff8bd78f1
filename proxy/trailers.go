package proxy

import (
	"bytes"

	"github.com/valyala/fasthttp"
)

var (
	hdrTrailer = []byte("Trailer")
	colon      = []byte(":")
)

// dropTrailers removes the trailer fields that ended a chunked request
// body from h, the client's request header, once the body is read.
// fasthttp keeps them beside the header fields: Peek finds them, and
// unannouncing them (removing Trailer, a hop-by-hop header) merges them
// into the header section, so they reached the upstream as headers, sent
// after the fields Sluice checked and set (a client could add a key, a
// class or a tenant the request line did not carry). A header field of
// the same name keeps its header-section values. A body with a length has
// no trailer: that case is one comparison.
func dropTrailers(h *fasthttp.RequestHeader) {
	if h.ContentLength() != -1 {
		return
	}
	tr := h.TrailerHeader()
	if len(tr) <= len(crlf) {
		return
	}
	// Rare: a chunked body with trailer fields. h's scratch buffers are
	// reused below, so the section is copied first.
	tr = bytes.Clone(tr)
	type field struct{ key, value []byte }
	var keep []field
	var names [][]byte
	for line := range bytes.SplitSeq(tr, crlf) {
		name, _, ok := bytes.Cut(line, colon)
		if !ok || len(name) == 0 || containsFold(names, name) {
			continue
		}
		names = append(names, name)
		for k, v := range h.All() {
			if bytes.EqualFold(k, name) {
				keep = append(keep, field{name, bytes.Clone(v)})
			}
		}
	}
	for _, name := range names {
		h.DelBytes(name) // from both sections
	}
	// Nothing is left in the trailer section to merge: forget the
	// announcement, so the values kept go back to the header section.
	h.DelBytes(hdrTrailer)
	for _, f := range keep {
		h.AddBytesKV(f.key, f.value)
	}
}

func containsFold(list [][]byte, b []byte) bool {
	for _, x := range list {
		if bytes.EqualFold(x, b) {
			return true
		}
	}
	return false
}
