package proxy

import (
	"errors"
	"io"

	"github.com/valyala/fasthttp"
)

// pooledBodyMax is the largest body buffer a pooled stream keeps for its
// next request. A larger one is dropped when its request no longer needs
// it, so a burst of big bodies does not stay resident in the pool.
const pooledBodyMax = 64 << 10

// bodyStep is the smallest step by which a body of unknown length
// reserves budget and grows its buffer; steps double with the size.
const bodyStep = 64 << 10

// readRequestBody reads the client's body into the stream's buffer, after
// reserving its bytes from the budget: at most server.max_request_body
// (413 request_too_large, refused from Content-Length before anything is
// read when it is known), and only what fits the budget (503
// buffer_budget). Nothing is buffered for a request that is refused. An
// unreadable body (a malformed chunk, or not sent within
// server.read_timeout) ends as bad_request_body. A refusal leaves the rest
// of the body unread: end answers it, then closes the connection without
// a reset (closeAfterUnreadBody). On success st.bodyRead is set.
func (s *Server) readRequestBody(ctx *fasthttp.RequestCtx, st *stream) ([]byte, outcome, bool) {
	limit := st.serverLimits.maxRequestBody
	r := ctx.RequestBodyStream()
	if r == nil {
		// Already read whole (a server without StreamRequestBody, or an
		// in-process caller): it still counts while the request holds it.
		b := ctx.PostBody()
		if len(b) > limit {
			return nil, outBodyTooLarge, false
		}
		if !st.holdRequestBody(len(b)) {
			return nil, outBufferBudget, false
		}
		st.bodyRead = true
		return b, 0, true
	}
	b, o, ok := st.readBodyStream(r, ctx.Request.Header.ContentLength(), limit)
	st.bodyRead = ok
	return b, o, ok
}

// readBodyStream reads a body of length cl (-1: chunked) from r.
func (st *stream) readBodyStream(r io.Reader, cl, limit int) ([]byte, outcome, bool) {
	if cl > limit {
		return nil, outBodyTooLarge, false
	}
	if cl >= 0 {
		if !st.holdRequestBody(cl) {
			return nil, outBufferBudget, false
		}
		buf := st.reqBody
		if cap(buf) < cl {
			buf = make([]byte, cl)
			st.reqBody = buf
		}
		buf = buf[:cl]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, outBadRequestBody, false
		}
		return buf, 0, true
	}
	buf := st.reqBody[:0]
	for {
		if len(buf) == int(st.reqHeld) || len(buf) == cap(buf) {
			if len(buf) > limit {
				return nil, outBodyTooLarge, false
			}
			step := min(max(bodyStep, len(buf)), limit+1-len(buf))
			if !st.holdRequestBody(step) {
				return nil, outBufferBudget, false
			}
			if cap(buf) < int(st.reqHeld) {
				nb := make([]byte, len(buf), st.reqHeld)
				copy(nb, buf)
				buf = nb
				st.reqBody = nb
			}
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), int(st.reqHeld))])
		buf = buf[:len(buf)+n]
		switch {
		case len(buf) > limit:
			return nil, outBodyTooLarge, false
		case errors.Is(err, io.EOF):
			return buf, 0, true
		case err != nil:
			return nil, outBadRequestBody, false
		}
	}
}

// holdRequestBody reserves n more bytes of budget for the request body.
func (st *stream) holdRequestBody(n int) bool {
	if !st.srv.budget.reserve(int64(n)) {
		return false
	}
	st.reqHeld += int64(n)
	return true
}

// releaseRequestBody gives the request body's budget back once the body
// has been written upstream (or will never be): a long stream does not
// hold its prompt's memory, and a buffer too large for the pool is
// dropped now rather than at the end of the stream. Owner only.
// While a retry may still send it (admission.keepBody), it is kept.
func (st *stream) releaseRequestBody() {
	if st.reqHeld == 0 || st.adm.keepBody {
		return
	}
	st.srv.budget.release(st.reqHeld)
	st.reqHeld = 0
	if cap(st.reqBody) > pooledBodyMax {
		st.req.ResetBody()
		st.reqBody = nil
	}
}
