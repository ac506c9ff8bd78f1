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
// may already be generating.
//
// One exception: a connection taken from the pool that the upstream had
// already closed (its idle timeout, a restart, a load balancer's drain)
// fails as soon as it is used, before any byte of an answer. That is not
// the upstream refusing the request, and counting it as a failed attempt
// would spend a retry on it, or with retries off fail the request, and
// after an upstream restart left a pool of such connections, open the
// breaker. So once per attempt such a failure on a connection that had
// carried a request before drops every idle connection of the pool (they
// are likely closed too) and sends the request again on a new one (see
// staleConn). A new connection failing so is the upstream's answer.
func (st *stream) roundTrip(hc *fasthttp.HostClient) error {
	sent := len(st.req.Body())
	reused, err := st.send(hc)
	if err == nil || !reused || !st.staleConn(err) || len(st.req.Body()) != sent {
		return err
	}
	hc.CloseIdleConnections()
	_, err = st.send(hc)
	return err
}

// staleConn reports whether err, from send, is a connection that was
// closed before it carried the request: the write failed with a reset or
// broken pipe, or the read ended before the first byte of an answer,
// early (before the first-token deadline) and not because Sluice closed
// it (client gone, shutdown).
func (st *stream) staleConn(err error) bool {
	if st.gone.Load() || st.cut.Load() || !st.srv.now().Before(st.firstTokenDeadline) {
		return false
	}
	var nothing fasthttp.ErrNothingRead
	return errors.Is(err, io.EOF) || errors.As(err, &nothing) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// send is one round trip on one connection (see roundTrip); reused says
// the connection had carried a request before.
func (st *stream) send(hc *fasthttp.HostClient) (reused bool, err error) {
	req, resp := &st.req, &st.resp
	resp.Reset()
	resp.StreamBody = true
	// A HEAD answer has headers only, whatever its Content-Length says.
	resp.SkipBody = req.Header.IsHead()

	cc, err := hc.AcquireConn(st.prov.timeouts.FirstToken, false)
	if err != nil {
		return false, err
	}
	conn := cc.Conn()
	if pc, ok := conn.(*pooledConn); ok {
		reused, pc.used = pc.used, true
	}
	if !st.attachConn(conn) {
		hc.CloseConn(cc)
		return reused, errClientGone
	}
	fail := func(err error) error {
		st.detachConn()
		hc.CloseConn(cc)
		return err
	}
	// One deadline for the write and the header read: a connection from
	// the pool keeps the deadlines of its last request until here.
	if err := conn.SetDeadline(st.firstTokenDeadline); err != nil {
		return reused, fail(err)
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
		return reused, fail(err)
	}
	br := hc.AcquireReader(conn)
	if err := resp.ReadLimitBody(br, 0); err != nil {
		hc.ReleaseReader(br)
		return reused, fail(err)
	}
	// fasthttp's connection type is unexported: keep it in a closure (one
	// small allocation per request).
	st.upstream = upstreamConn{hc: hc, br: br, conn: conn, put: func(reuse bool) {
		if reuse {
			hc.ReleaseConn(cc)
		} else {
			hc.CloseConn(cc)
		}
	}}
	return reused, nil
}

// upstreamConn is what the stream must give back when it is done with the
// response body. Only the goroutine that owns the stream touches it.
type upstreamConn struct {
	hc   *fasthttp.HostClient
	br   *bufio.Reader
	conn net.Conn
	put  func(reuse bool) // returns the connection to the pool or closes it
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
