package proxy

import (
	"bufio"
	"net"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// trackingTransport is the upstream round trip for every proxied request. It
// does what fasthttp's default transport does, with two differences that
// Sluice needs:
//
//   - the upstream connection is published on the request's stream as soon
//     as it is acquired, so a client disconnect, a timeout or shutdown can
//     close it while Sluice still waits for response headers (fasthttp's
//     Do has no cancellation);
//   - the response body is always streamed and its connection is handed to
//     the stream, which returns it to the pool only after reading to EOF.
//
// No retries: LLM requests are not idempotent and a request that reached the
// provider may already be generating.
type trackingTransport struct{}

// streamOf recovers the stream that owns req. Every request passed to a
// HostClient with this transport is the first field of a stream (see
// stream.req); the transport is installed only on Sluice's own clients.
func streamOf(req *fasthttp.Request) *stream {
	return (*stream)(unsafe.Pointer(req))
}

func (trackingTransport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	st := streamOf(req)
	cc, err := hc.AcquireConn(st.prov.timeouts.FirstToken, false)
	if err != nil {
		return false, err
	}
	conn := cc.Conn()
	if !st.attachConn(conn) {
		hc.CloseConn(cc)
		return false, errClientGone
	}
	fail := func(err error) (bool, error) {
		st.detachConn()
		hc.CloseConn(cc)
		return false, err
	}
	deadline := st.firstTokenDeadline
	if err := conn.SetWriteDeadline(deadline); err != nil {
		return fail(err)
	}
	bw := hc.AcquireWriter(conn)
	err = req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if err != nil {
		return fail(err)
	}
	if err := conn.SetReadDeadline(deadline); err != nil {
		return fail(err)
	}
	br := hc.AcquireReader(conn)
	resp.StreamBody = true
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
	return false, nil
}

// upstreamConn is what the stream must give back when it is done with the
// response body. Only the goroutine that owns the stream touches it.
type upstreamConn struct {
	hc   *fasthttp.HostClient
	br   *bufio.Reader
	conn net.Conn
	put  func(reuse bool) // returns the connection to the pool or closes it
}
