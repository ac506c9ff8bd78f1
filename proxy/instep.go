package proxy

import (
	"bufio"
	"bytes"
	"sync/atomic"
	"time"
)

// An HTTP/1.1 connection carries answers in the order of its requests,
// with nothing to tell whose answer is whose but their framing. An
// upstream whose framing lies (more bytes than its Content-Length, bytes
// after its last chunk, a body to a HEAD, Content-Length beside
// Transfer-Encoding) leaves bytes on the connection that the next request
// on it reads as its answer: another client's. So a connection is kept
// only while it is in step: nothing beyond its answer buffered, one
// framing declared (closeUpstream), nothing arrived while it was idle
// (send). And since bytes out of step can also arrive after that last
// look, an upstream that sent some keeps none of its connections for
// stepDistrust after the last time it did.

// stepDistrust is how long an upstream pool keeps no connections after an
// answer out of step: long enough that an upstream that lies about its
// framing pays a connection per request rather than have its stray bytes
// read as another request's answer, short enough that a fixed one gets
// its keep-alive back without a reload.
const stepDistrust = 10 * time.Minute

// stepState is what an upstream pool remembers of answers out of step.
type stepState struct {
	until atomic.Int64 // unix nanoseconds until which nothing is kept; 0: never out of step
}

// trusted reports whether the pool may keep connections at now.
func (ps *stepState) trusted(now func() time.Time) bool {
	u := ps.until.Load()
	return u == 0 || now().UnixNano() >= u
}

// mark records an answer out of step at now and reports whether the pool
// was trusted until then.
func (ps *stepState) mark(now time.Time) bool {
	old := ps.until.Swap(now.Add(stepDistrust).UnixNano())
	return old == 0 || now.UnixNano() >= old
}

// upstreamInStep reports whether the connection of an answer read whole
// may go back to the pool: nothing is buffered beyond the answer, its
// header declared one framing, and its pool is not out of step lately.
func (st *stream) upstreamInStep() bool {
	u := &st.upstream
	if u.br.Buffered() > 0 || u.mixed {
		st.outOfStep(u.pool, u.hc.Addr)
		return false
	}
	return u.pool == nil || u.pool.trusted(st.srv.now)
}

// outOfStep records an answer out of step on a connection of pool (nil:
// none to remember it) to the upstream at addr, and says so in the log
// when the pool was trusted until now.
func (st *stream) outOfStep(pool *stepState, addr string) {
	if pool == nil || !pool.mark(st.srv.now()) {
		return
	}
	st.srv.log.Warn("upstream answers out of step with their requests: its connections are closed after each answer",
		"provider", st.prov.name, "upstream", addr, "for", stepDistrust.String())
}

// buffered returns the bytes br holds, without reading more.
func buffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
}

var (
	nameContentLength    = []byte("content-length")
	nameTransferEncoding = []byte("transfer-encoding")
)

// mixedFraming reports whether the response header at the start of b, as
// far as it is there, declares both Content-Length and Transfer-Encoding.
// fasthttp reads such an answer as chunked; a hop that read it by its
// length would be out of step with Sluice, so its connection is closed
// after it (RFC 9112, section 6.3). A header not yet whole is judged on
// its whole lines.
func mixedFraming(b []byte) bool {
	cl, te := false, false
	for {
		i := bytes.IndexByte(b, '\n')
		if i <= 1 { // no whole line left, or the empty line that ends the header
			return false
		}
		line := b[:i]
		b = b[i+1:]
		switch line[0] | 0x20 {
		case 'c':
			cl = cl || isField(line, nameContentLength)
		case 't':
			te = te || isField(line, nameTransferEncoding)
		}
		if cl && te {
			return true
		}
	}
}

// isField reports whether the header line holds the field name (lower
// case), in any case, with optional whitespace before its colon.
func isField(line, name []byte) bool {
	if len(line) <= len(name) || !bytes.EqualFold(line[:len(name)], name) {
		return false
	}
	rest := bytes.TrimLeft(line[len(name):], " \t")
	return len(rest) > 0 && rest[0] == ':'
}
