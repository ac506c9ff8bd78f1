package proxy

import (
	"bytes"
	"io"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// A refusal sent before the request body was read (no_route, bad_path,
// request_too_large, ...) must reach a client that is still sending that
// body. The OpenAI and Anthropic SDKs write the whole body before they read
// anything. Closing the socket at once with the body's bytes unread makes
// the kernel answer the bytes still arriving with a reset: the client's
// write fails with ECONNRESET, which the SDKs report as a connection error
// without reading the answer (and some stacks drop the answer unread in
// the receive buffer with the reset). So, as Go's net/http does (closeWriteAndWait and its bounded
// read after the handler), such a refusal is written with "Connection:
// close", the write side is shut (the client sees the end of the answer),
// and what the client still sends is read and dropped until it closes, or
// until lingerTime or lingerBytes, whichever comes first. Only then is the
// socket closed.
//
// Off the hot path: a request whose body was read (every request that
// reached admission) never comes here.

// fasthttpDrain is how much of an unread body of known length fasthttp
// itself reads and drops after the handler, to keep the connection
// (maxUnreadStreamBodySize in fasthttp v1.78); with more left it closes
// the connection at once. A refusal that keeps the connection leaves
// such a body to it.
const fasthttpDrain = 256 << 10

const (
	// lingerTime bounds a refused connection's wait for its client to
	// take the answer and close: a round trip plus the time to send the
	// rest of the body. 2 s covers lingerBytes at 128 Mbit/s; net/http
	// waits 500 ms, but without reading, so a client blocked writing a
	// large body never gets to read the answer there.
	lingerTime = 2 * time.Second
	// lingerBytes bounds what is read and dropped. A refused body is
	// usually somewhat over server.max_request_body (8 MiB by default;
	// providers accept up to 32 MB), and a client sending more than this
	// after its refusal gets a reset.
	lingerBytes = 32 << 20
	// maxLingering bounds the connections lingering at once. Lingering
	// connections are no longer counted in server.max_connections, so a
	// flood of refused bodies holds at most this many more sockets (and
	// goroutines), each for at most lingerTime. Beyond it the answer is
	// written and the connection closed at once.
	maxLingering = 256
)

// closeAfterUnreadBody is called by end after the refusal o was put in
// ctx.Response while the request body was not read. A body_timeout is
// answered and closed at once. A refusal that keeps the connection
// (anything but request_too_large and bad_request_body)
// with at most fasthttpDrain bytes of known length left is left to
// fasthttp. Otherwise the answer is written by the lingering handler.
func (s *Server) closeAfterUnreadBody(ctx *fasthttp.RequestCtx, o outcome) {
	cl := ctx.Request.Header.ContentLength() // -1: chunked; -2 or 0: no body
	if cl == 0 || cl < -1 {
		return
	}
	if o == outBodyTimeout {
		// The client is too slow to wait for: answered, then closed by
		// fasthttp (the body's read failed).
		ctx.Response.SetConnectionClose()
		return
	}
	closes := o == outBodyTooLarge || o == outBadRequestBody
	if !closes && cl > 0 && cl <= fasthttpDrain {
		return
	}
	ctx.Response.SetConnectionClose()
	ctx.Response.SkipBody = ctx.IsHead()
	var wire bytes.Buffer
	if _, err := ctx.Response.WriteTo(&wire); err != nil {
		return // fasthttp writes it and closes
	}
	// fasthttp v1.78 skips a hijack handler when the connection is to
	// close after the response (asked by the request or the answer, at
	// shutdown, after a failed body read or a refused Expect), unless it
	// writes no response itself: so the answer is serialised here and
	// written by the handler, which fasthttp calls with the connection
	// reading through its buffer (body bytes it has read ahead come
	// first), and closes when the handler returns.
	ctx.HijackSetNoResponse(true)
	b := wire.Bytes()
	ctx.Hijack(func(c net.Conn) { s.lingers.answer(c, b) })
}

// lingerSet tracks the connections being answered and closed by
// closeAfterUnreadBody, so that Server.Close cuts them and waits for
// their goroutines.
type lingerSet struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	// wait replaces lingerTime when set (tests; guarded by mu).
	wait time.Duration
}

// answer writes wire on c, shuts c's write side and drops what the client
// still sends, within lingerTime and lingerBytes. fasthttp closes c when
// it returns.
func (l *lingerSet) answer(c net.Conn, wire []byte) {
	linger, ok := l.enter(c)
	if !ok {
		return // Sluice is closing
	}
	defer l.leave(c)
	if _, err := c.Write(wire); err != nil || !linger {
		return
	}
	closeWrite(c)
	_, _ = io.CopyN(io.Discard, c, lingerBytes)
}

// enter registers c and sets its deadline (under the lock, so that close
// cannot come in between and see its expired deadline replaced). ok is
// false once the set is closed; linger is false when maxLingering
// connections are registered already. Deadlines are the operating
// system's, on the wall clock, not the server's injected one.
func (l *lingerSet) enter(c net.Conn) (linger, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false, false
	}
	wait := lingerTime
	if l.wait > 0 {
		wait = l.wait
	}
	_ = c.SetDeadline(time.Now().Add(wait))
	if l.conns == nil {
		l.conns = make(map[net.Conn]struct{})
	}
	linger = len(l.conns) < maxLingering
	l.conns[c] = struct{}{}
	l.wg.Add(1)
	return linger, true
}

func (l *lingerSet) leave(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	l.wg.Done()
}

// len returns how many connections are lingering, for tests.
func (l *lingerSet) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// close ends every lingering connection at once (an expired deadline
// wakes its reads and writes) and waits for their goroutines; later
// refusals close without lingering.
func (l *lingerSet) close() {
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		_ = c.SetDeadline(aLongTimeAgo)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

var aLongTimeAgo = time.Unix(1, 0)

// closeWrite shuts the write side of the hijacked connection c: a TCP FIN,
// or TLS's close_notify. Connections without one (in-memory) skip it.
func closeWrite(c net.Conn) {
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		c = u.UnsafeConn()
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
