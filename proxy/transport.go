package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/valyala/fasthttp"
)

// roundTrip sends st.req to the upstream of pool hc and reads the response
// header into st.resp, leaving the body on the connection for the caller
// to stream or read. It does what fasthttp's HostClient.Do does with its
// default transport, with two differences that Sluice needs:
//
//   - the upstream connection is published on the stream as soon as it is
//     acquired, so a client disconnect, a timeout or shutdown can close it
//     while Sluice still waits for response headers (Do has no
//     cancellation);
//   - the response body is always streamed and its connection stays with
//     the stream, which gives it back to the pool only after reading to EOF
//     (closeUpstream).
//
// It is a method of the stream rather than a fasthttp Transport, so the
// per-request state needs no lookup from the *fasthttp.Request. No retries:
// LLM requests are not idempotent and a request that reached the provider
// may already be generating; whether to send it again is the retry
// policy's decision, within its budget.
//
// A connection taken from the pool that the upstream closed while it was
// idle (its idle timeout, a restart, a load balancer's drain) is not the
// upstream refusing the request: counting it as a failed attempt would
// spend a retry on it, or with retries off fail the request, and after an
// upstream restart left a pool of such connections, open the breaker. So
// an idle connection is looked at before the request is written (send):
// one the upstream closed, or that holds bytes nobody asked for, is closed
// with every idle connection of the pool (they are likely closed too) and
// another is taken. The upstream may still close it between that look and
// the write: a write that fails so, on a connection that had carried a
// request before, is sent once more on a new connection (see staleConn),
// since nothing of it was delivered. Once a request is written, a failure
// is the attempt's, whatever the connection: an upstream that read a
// request and then closed may be generating it, and a second copy sent
// here would be billed twice.
func (st *stream) roundTrip(hc *fasthttp.HostClient) error {
	sent := len(st.req.Body())
	reused, written, err := st.send(hc)
	if err == nil || written || !reused || !st.staleConn(err) || len(st.req.Body()) != sent {
		return err
	}
	hc.CloseIdleConnections()
	_, _, err = st.send(hc)
	return err
}

// staleConn reports whether err, from a write in send, is a connection
// that was closed before it carried the request: the write failed with a
// reset, a broken pipe or EOF, before the first-token deadline and not
// because Sluice closed it (client gone, shutdown).
func (st *stream) staleConn(err error) bool {
	if st.gone.Load() || st.cut.Load() || !st.srv.now().Before(st.firstTokenDeadline) {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// send is one round trip on one connection (see roundTrip); reused says
// the connection had carried a request before, written that the whole
// request was handed to it.
func (st *stream) send(hc *fasthttp.HostClient) (reused, written bool, err error) {
	req, resp := &st.req, &st.resp
	resp.Reset()
	resp.StreamBody = true
	// A HEAD answer has headers only, whatever its Content-Length says.
	resp.SkipBody = req.Header.IsHead()

	cc, err := hc.AcquireConn(st.prov.timeouts.FirstToken, false)
	var pool *stepState
	for err == nil {
		pc, ok := cc.Conn().(*pooledConn)
		if !ok {
			break
		}
		pool = pc.pool
		if reused, pc.used = pc.used, true; !reused {
			break
		}
		ready, closed := pc.look()
		if !ready {
			break
		}
		// Closed by the upstream while idle, or holding bytes nobody
		// asked for: never written on. Each turn closes one connection,
		// so the pool runs out of such ones and a new one is dialled.
		if !closed {
			st.outOfStep(pool, hc.Addr)
		}
		hc.CloseConn(cc)
		hc.CloseIdleConnections()
		cc, err = hc.AcquireConn(st.prov.timeouts.FirstToken, false)
	}
	if err != nil {
		return false, false, err
	}
	conn := cc.Conn()
	if !st.attachConn(conn) {
		hc.CloseConn(cc)
		return reused, false, errClientGone
	}
	fail := func(err error) error {
		st.detachConn()
		hc.CloseConn(cc)
		return err
	}
	// One deadline for the write and the header read: a connection from
	// the pool keeps the deadlines of its last request until here.
	if err := conn.SetDeadline(st.firstTokenDeadline); err != nil {
		return reused, false, fail(err)
	}
	bw := hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	// Written (or never will be): the body's budget goes back now, not at
	// the end of a stream that may run for minutes.
	st.releaseRequestBody()
	if err != nil {
		return reused, false, fail(err)
	}
	br := hc.AcquireReader(conn)
	// Whether the answer's header declares two framings (Content-Length
	// beside Transfer-Encoding) is read while the header is still in the
	// buffer. An error here is left to ReadLimitBody, which reads the
	// header and reports it.
	mixed := false
	if _, err := br.Peek(1); err == nil {
		mixed = mixedFraming(buffered(br))
	}
	if err := resp.ReadLimitBody(br, 0); err != nil {
		hc.ReleaseReader(br)
		return reused, true, fail(err)
	}
	// fasthttp's connection type is unexported: keep it in a closure (one
	// small allocation per request).
	st.upstream = upstreamConn{hc: hc, br: br, conn: conn, mixed: mixed, pool: pool, put: func(reuse bool) {
		if reuse {
			hc.ReleaseConn(cc)
		} else {
			hc.CloseConn(cc)
		}
	}}
	return reused, true, nil
}

// upstreamConn is what the stream must give back when it is done with the
// response body. Only the goroutine that owns the stream touches it.
type upstreamConn struct {
	hc    *fasthttp.HostClient
	br    *bufio.Reader
	conn  net.Conn
	mixed bool             // the answer's header declared two framings (mixedFraming)
	pool  *stepState       // what the connection's pool remembers of answers out of step; may be nil
	put   func(reuse bool) // returns the connection to the pool or closes it
}

// responseBody returns the upstream response body to stream to the client:
// a chunked body through st.chunked, which hands out every chunk that has
// arrived at once; any other (Content-Length, or until close) through
// fasthttp's reader, which does so already.
func (st *stream) responseBody() io.Reader {
	if st.resp.Header.ContentLength() == -1 && st.upstream.br != nil {
		st.chunked.reset(st.upstream.br)
		return &st.chunked
	}
	if r := st.resp.BodyStream(); r != nil {
		return r
	}
	return eofReader{}
}

// bodyReady reports whether the first Read of the body returned by
// responseBody will return at once, with what came with the headers.
func (st *stream) bodyReady() bool {
	if st.body == io.Reader(&st.chunked) {
		return st.chunked.ready()
	}
	return st.upstream.br != nil && st.upstream.br.Buffered() > 0
}
