package proxy

import (
	"errors"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
)

// bufferAnswer reads a non-streaming answer (JSON answers, errors) into
// st.respBuf, within server.max_response_body and the buffer budget.
// complete is false when it does not fit: st.respBuf then holds its start
// and src the rest. When the body cannot be read, it returns the outcome
// to end with.
func (st *stream) bufferAnswer() (complete bool, src io.Reader, o outcome, ok bool) {
	// Non-stream bodies get the total deadline (headers had first_token,
	// which for a non-streaming request is the total one already).
	if st.upstream.conn != nil && !st.firstTokenDeadline.Equal(st.totalDeadline) {
		_ = st.upstream.conn.SetReadDeadline(st.totalDeadline)
	}
	src = st.resp.BodyStream()
	if src == nil {
		return true, nil, 0, true
	}
	complete, o, ok = st.bufferBody(src)
	return complete, src, o, ok
}

// relayBuffered relays a non-streaming answer buffered by bufferAnswer,
// metered, with the upstream's status and headers: up to pooledBodyMax as
// a body fasthttp writes after the handler returns; larger, from Sluice's
// buffer in reader mode (relay), so the buffer and its budget are held
// until written and the buffer is never pooled. An answer that did not
// fit the limit or the budget (complete false) is relayed as it arrives
// from src, unmetered: the controller hears its status only.
func (s *Server) relayBuffered(ctx *fasthttp.RequestCtx, st *stream, complete bool, src io.Reader) {
	ctx.Response.Reset()
	now := s.now()
	body := st.respBuf
	ra := feedback.RetryAfter(st.resp.Header.Peek("Retry-After"), st.resp.Header.Peek("Retry-After-Ms"), now)
	copyResponseHeaders(&ctx.Response.Header, &st.resp.Header)
	st.nameUpstream(&ctx.Response.Header)
	if !complete {
		var class feedback.ErrorClass
		if st.status >= 300 {
			class = feedback.ClassifyError(st.status, body)
		}
		st.startRelay(ctx, now, src, st.answerOutcome(class, ra), st.resp.Header.ContentLength())
		return
	}
	ctl := st.answerOutcome(st.meterBuffered(body, now), ra)
	if !st.resp.SkipBody {
		// Set from the body; a HEAD answer keeps the upstream's.
		ctx.Response.Header.Del("Content-Length")
		ctx.Response.Header.SetContentLength(len(body))
	}
	if len(body) <= pooledBodyMax {
		ctx.SetBody(body)
		s.end(ctx, st, now, outComplete, ctl)
		return
	}
	// The upstream is done: its connection, the request's attempt,
	// reservation and permit go back now; the buffer goes out in reader
	// mode and ends the request when written.
	st.closeUpstream(true)
	st.settle(now, outComplete, ctl)
	st.startRelay(ctx, now, nil, ctl, len(body))
}

// meterBuffered meters a whole non-streaming answer and returns its error
// class.
func (st *stream) meterBuffered(body []byte, now time.Time) feedback.ErrorClass {
	st.meter.Reset(st.dialect, st.adm.start)
	st.metered = true
	if st.wantModel {
		st.captureResponseModel(body)
	}
	if st.status >= 200 && st.status < 300 {
		st.meter.MeterJSON(body, now)
		return st.meter.Result().ErrorClass
	}
	return feedback.ClassifyError(st.status, body)
}

// bufferBody reads the upstream body r into st.respBuf, reserving budget
// as it grows. complete is false when the body turned out larger than
// server.max_response_body or the budget: st.respBuf then holds its start
// and r the rest. When the body cannot be read, it returns the outcome to
// end with.
func (st *stream) bufferBody(r io.Reader) (complete bool, o outcome, ok bool) {
	limit := st.serverLimits.maxResponseBody
	cl := st.resp.Header.ContentLength()
	buf := st.respBuf[:0]
	defer func() { st.respBuf = buf }()
	if cl > limit {
		return false, 0, true
	}
	for {
		if len(buf) == int(st.respHeld) {
			if len(buf) > limit {
				return false, 0, true
			}
			step := min(max(bodyStep, len(buf)), limit+1-len(buf))
			if cl >= 0 {
				step = cl + 1 - len(buf) // room to see the end
			}
			if !st.srv.budget.reserve(int64(step)) {
				return false, 0, true
			}
			st.respHeld += int64(step)
			if cap(buf) < int(st.respHeld) {
				nb := make([]byte, len(buf), st.respHeld)
				copy(nb, buf)
				buf = nb
			}
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), int(st.respHeld))])
		buf = buf[:len(buf)+n]
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF):
			return true, 0, true
		case st.cut.Load():
			return false, outShutdown, false
		case st.gone.Load():
			return false, outClientGone, false
		}
		o, _, _ := classifyDoErr(err, false)
		return false, o, false
	}
}

// releaseResponseBody gives back the budget of a buffered answer.
func (st *stream) releaseResponseBody() {
	st.srv.budget.release(st.respHeld)
	st.respHeld = 0
}

// relay is the reader-mode body of a non-streaming answer fasthttp does
// not get whole: buf (what Sluice buffered) and then src (the rest of the
// upstream body, nil when buf is all of it). Like stream.Read for SSE, it
// keeps the client's write deadline moving while bytes go out, and its
// CloseWithError is where the request ends.
type relay struct {
	st  *stream
	buf []byte
	src io.Reader
	ctl adaptive.Outcome // what the controller hears if the answer is relayed whole
}

// startRelay hands st.respBuf, then src, to fasthttp as the body (size -1:
// unknown). The handler returns after it.
func (st *stream) startRelay(ctx *fasthttp.RequestCtx, now time.Time, src io.Reader, ctl adaptive.Outcome, size int) {
	st.relayBody = relay{st: st, buf: st.respBuf, src: src, ctl: ctl}
	st.streamed = true
	if src != nil {
		// Still reading from the upstream: the total budget bounds it.
		st.writeCap = st.totalDeadline.Add(time.Second)
	}
	st.startWriting(ctx, now)
	ctx.SetBodyStream(&st.relayBody, size)
}

// Read implements io.Reader for fasthttp's reader mode.
func (r *relay) Read(p []byte) (int, error) {
	st := r.st
	if st.pending != nil {
		return 0, st.pending
	}
	st.keepWriting(st.srv.now())
	if len(r.buf) > 0 {
		n := copy(p, r.buf)
		r.buf = r.buf[n:]
		return n, nil
	}
	if r.src == nil {
		st.eof = true
		return 0, io.EOF
	}
	n, err := r.src.Read(p)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, io.EOF):
		st.eof = true
		err = io.EOF
	case st.cut.Load():
		err = errShutdownCut
	case st.gone.Load():
		err = errClientGone
	case isTimeout(err):
		err = errTotalTimeout // the only deadline on this read
	default:
		err = errUpstreamBroke
	}
	if n > 0 {
		st.pending = err
		return n, nil
	}
	return 0, err
}

// CloseWithError is called by fasthttp once the body is written or failed.
func (r *relay) CloseWithError(err error) error {
	st := r.st
	now := st.srv.now()
	o := st.closeOutcome(err)
	var ctl adaptive.Outcome
	if o == outComplete {
		ctl = r.ctl
	}
	st.srv.end(nil, st, now, o, ctl)
	return nil
}

// startWriting arms the client's write deadline as the handler hands a
// body to fasthttp in reader mode: set through ctx so that fasthttp clears
// it after the response, then moved on by keepWriting.
func (st *stream) startWriting(ctx *fasthttp.RequestCtx, now time.Time) {
	st.client = ctx.Conn()
	_ = ctx.SetWriteDeadline(st.writeDeadline(now))
	st.writeDeadlineNext = now.Add(time.Duration(st.serverLimits.writeTimeout / 8))
}

// keepWriting moves the client's write deadline on while a body goes out,
// so that a client that accepts no bytes for server.write_timeout is cut
// (between 1 and 1 1/8 write_timeouts after its last progress) and its
// permit freed. To keep the per-event cost to one comparison, the deadline
// moves at most every write_timeout/8.
func (st *stream) keepWriting(now time.Time) {
	if now.Before(st.writeDeadlineNext) || st.client == nil { // nil: served in-process, no connection
		return
	}
	_ = st.client.SetWriteDeadline(st.writeDeadline(now))
	st.writeDeadlineNext = now.Add(time.Duration(st.serverLimits.writeTimeout / 8))
}

// writeDeadline is now + 1 1/8 write_timeouts, capped at writeCap when the
// body still comes from the upstream (its total budget bounds it).
func (st *stream) writeDeadline(now time.Time) time.Time {
	wt := time.Duration(st.serverLimits.writeTimeout)
	dl := now.Add(wt + wt/8)
	if !st.writeCap.IsZero() && dl.After(st.writeCap) {
		return st.writeCap
	}
	return dl
}
