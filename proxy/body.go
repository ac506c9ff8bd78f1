package proxy

import (
	"errors"
	"io"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// pooledBodyMax is the largest body buffer a pooled stream keeps for its
// next request. A larger one is dropped when its request no longer needs
// it, so a burst of big bodies does not stay resident in the pool.
const pooledBodyMax = 64 << 10

// bodyStep is the smallest step by which an answer being buffered
// reserves budget and grows its buffer; steps double with the size.
const bodyStep = 64 << 10

// requestBodyStep is the smallest step by which a request body reserves
// budget and grows its buffer as its bytes arrive; steps double with the
// size, so a body holds at most about twice what it has sent. It is small
// so that connections that send the start of a large body and stop hold
// little.
const requestBodyStep = 4 << 10

// readRequestBody reads the client's body into the stream's buffer, taking
// budget as its bytes arrive: at most server.max_request_body (413
// request_too_large, refused from Content-Length before anything is read
// when it is known), and only what fits the budget (503 buffer_budget,
// the moment the next step does not fit). A body that has not begun to
// arrive holds nothing, however large its Content-Length. The body must
// arrive within server.body_timeout and server.min_body_rate (408
// body_timeout). Nothing is buffered for a request that is refused. An
// unreadable body (a malformed chunk, or cut short) ends as
// bad_request_body. A refusal leaves the rest of the body unread: end
// answers it, then closes the connection without a reset
// (closeAfterUnreadBody). On success st.bodyRead is set.
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
	cl := ctx.Request.Header.ContentLength()
	if cl == 0 {
		st.bodyRead = true
		return st.reqBody[:0], 0, true
	}
	// Deadlines are the operating system's, on the wall clock.
	p := bodyPace{ctx: ctx, start: time.Now(), lim: st.serverLimits}
	b, o, ok := st.readBodyStream(r, cl, limit, &p)
	st.bodyRead = ok
	return b, o, ok
}

// bodyPace moves the read deadline of a request body as its bytes
// arrive: server.body_timeout after the headers, plus the time
// server.min_body_rate gives the bytes received, never past
// server.read_timeout after the headers. The deadline is set an eighth of
// body_timeout later than that and moved only once the body has earned
// more, so that a body arriving in a few reads sets it once.
type bodyPace struct {
	ctx   *fasthttp.RequestCtx // nil: no deadline (tests reading a plain reader)
	start time.Time
	lim   *serverLimits
	until time.Duration // the deadline in force, after start; 0: none yet
	set   time.Time     // start + until
}

// arm sets the deadline for a body of which received bytes have arrived.
func (p *bodyPace) arm(received int) {
	if p.ctx == nil {
		return
	}
	d := p.lim.bodyTimeout
	if p.lim.minBodyRate > 0 {
		d += time.Duration(int64(received) * int64(time.Second) / p.lim.minBodyRate)
	}
	rt := p.lim.readTimeout
	if rt > 0 {
		d = min(d, rt)
	}
	if p.until > 0 && d <= p.until {
		return // the deadline in force is late enough
	}
	p.until = d + p.lim.bodyTimeout/8
	if rt > 0 {
		p.until = min(p.until, rt)
	}
	p.set = p.start.Add(p.until)
	_ = p.ctx.SetReadDeadline(p.set)
}

// failed names a failed read: body_timeout once the deadline has passed
// (however the reader wrapped the error), else bad_request_body.
func (p *bodyPace) failed(err error) outcome {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || p.ctx != nil && !p.set.IsZero() && !time.Now().Before(p.set) {
		return outBodyTimeout
	}
	return outBadRequestBody
}

// readBodyStream reads a body of length cl (-1: chunked) from r. Its
// buffer and budget grow only once a byte beyond what it holds has
// arrived, by a step that doubles with the size.
func (st *stream) readBodyStream(r io.Reader, cl, limit int, p *bodyPace) ([]byte, outcome, bool) {
	if cl > limit {
		return nil, outBodyTooLarge, false
	}
	want := limit // the most this body may hold
	if cl >= 0 {
		want = cl
	}
	p.arm(0)
	buf := st.reqBody[:0]
	for {
		if cl >= 0 && len(buf) == cl {
			return buf, 0, true
		}
		if len(buf) == int(st.reqHeld) {
			// Full: wait for one more byte before holding more.
			n, err := r.Read(st.oneByte[:])
			switch {
			case n == 0 && errors.Is(err, io.EOF):
				if cl >= 0 {
					return nil, outBadRequestBody, false // cut short
				}
				return buf, 0, true
			case n == 0 && err != nil:
				return nil, p.failed(err), false
			case n == 0:
				continue
			}
			if len(buf) >= want {
				return nil, outBodyTooLarge, false
			}
			step := min(max(requestBodyStep, len(buf)), want-len(buf))
			if !st.holdRequestBody(step) {
				return nil, outBufferBudget, false
			}
			if cap(buf) < int(st.reqHeld) {
				nb := make([]byte, len(buf), st.reqHeld)
				copy(nb, buf)
				buf = nb
				st.reqBody = nb
			}
			buf = append(buf, st.oneByte[0])
			p.arm(len(buf))
			if errors.Is(err, io.EOF) {
				if cl >= 0 && len(buf) < cl {
					return nil, outBadRequestBody, false
				}
				return buf, 0, true
			}
			continue
		}
		n, err := r.Read(buf[len(buf):st.reqHeld])
		buf = buf[:len(buf)+n]
		if n > 0 {
			p.arm(len(buf))
		}
		switch {
		case errors.Is(err, io.EOF):
			if cl >= 0 && len(buf) < cl {
				return nil, outBadRequestBody, false // cut short
			}
			return buf, 0, true
		case err != nil:
			return nil, p.failed(err), false
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
