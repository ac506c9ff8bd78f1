package proxy

import (
	"bufio"
	"io"
	"net"

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
func (st *stream) roundTrip(hc *fasthttp.HostClient) error {
	req, resp := &st.req, &st.resp
	resp.Reset()
	resp.StreamBody = true
	// A HEAD answer has headers only, whatever its Content-Length says.
	resp.SkipBody = req.Header.IsHead()

	cc, err := hc.AcquireConn(st.prov.timeouts.FirstToken, false)
	if err != nil {
		return err
	}
	conn := cc.Conn()
	if !st.attachConn(conn) {
		hc.CloseConn(cc)
		return errClientGone
	}
	fail := func(err error) error {
		st.detachConn()
		hc.CloseConn(cc)
		return err
	}
	// One deadline for the write and the header read: a connection from
	// the pool keeps the deadlines of its last request until here.
	if err := conn.SetDeadline(st.firstTokenDeadline); err != nil {
		return fail(err)
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
		return fail(err)
	}
	br := hc.AcquireReader(conn)
	if err := resp.ReadLimitBody(br, 0); err != nil {
		hc.ReleaseReader(br)
		return fail(err)
	}
	// fasthttp's connection type is unexported: keep it in a closure (one
	// small allocation per request).
	st.up = upstreamConn{hc: hc, br: br, conn: conn, put: func(reuse bool) {
		if reuse {
			hc.ReleaseConn(cc)
		} else {
			hc.CloseConn(cc)
		}
	}}
	return nil
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
	if st.resp.Header.ContentLength() == -1 && st.up.br != nil {
		st.chunked.reset(st.up.br)
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
	return st.up.br != nil && st.up.br.Buffered() > 0
}
