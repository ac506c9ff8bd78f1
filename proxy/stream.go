package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/adaptive/control"
	"github.com/sluicehq/sluice/feedback"
)

// stream is the state of one proxied request, from admission to the end of
// its response body. It is pooled.
//
// Ownership: the handler goroutine owns it until it hands the body to
// fasthttp (SetBodyStream); from then on fasthttp's writer goroutine owns it
// and ends it in CloseWithError. Other goroutines (the disconnect watcher,
// shutdown) only ever call interrupt, which closes the upstream connection
// and frees the permit; they never touch buffers or the pool.
//
// Its fields fall in three groups, so that put cannot forget one: the
// buffers a pooled stream keeps for its next request, each emptied in put;
// the fields other goroutines touch through interrupt, each reset by put
// with its own operation; and streamState, everything else, zeroed in one
// assignment.
type stream struct {
	// Kept across requests for their memory; put empties what a next
	// request must not see, and the rest is overwritten before use.
	req           fasthttp.Request
	resp          fasthttp.Response
	uri           []byte               // upstream request-URI scratch
	reqBody       []byte               // request body buffer; pooled up to pooledBodyMax
	respBuf       []byte               // non-streaming answer buffer; pooled up to pooledBodyMax
	attrs         []attribute.KeyValue // server span attributes, set at its end
	upstreamAttrs []attribute.KeyValue // client span attributes, set at its end
	meter         feedback.Meter       // keeps its parser's buffer; Reset for each response (metered)

	// Shared with interrupt, from the disconnect watcher or shutdown.
	//
	// permit is the request's right to be in flight. Ending it
	// (Finish) releases it and tells the controller how the request
	// ended, exactly once, whoever gets there first: the owner at the
	// request's end, the disconnect watcher, or shutdown. Acquire grants
	// it afresh for each request; put leaves it to adaptive.
	permit       adaptive.Permit
	gone         atomic.Bool // client disconnected or stream cut
	cut          atomic.Bool // gone because of shutdown, not the client
	mu           sync.Mutex  // guards attachedConn and cancelCh
	attachedConn net.Conn    // the upstream connection interrupt closes (attachConn)
	cancelCh     chan struct{}

	streamState
}

// streamState is the per-request state of a stream that only its owner
// touches; put zeroes it whole.
type streamState struct {
	srv     *Server
	prov    *provider    // nil for a request no provider matched
	errs    *errorBodies // the provider's error bodies (no_route's when prov is nil)
	dialect feedback.Dialect
	info    feedback.Request
	flow    adaptive.Flow // tenant, class, cost, deadline, retry (flow.go)
	id      identity      // the client and its policy (clients.go)
	adm     admission     // rate reservation and upstream attempts (admission.go)

	watchFD          int
	watched          bool
	start            time.Time // permit granted; TTFT and deadlines count from here
	firstTokenAt     time.Time // when the first output token arrived
	totalDeadline    time.Time // the end of the request's total timeout
	waitDeadline     time.Time // the end of the request's wait budget (paceWithin)
	readDeadlineNext time.Time // when extendDeadline next moves the upstream read deadline
	upstream         upstreamConn
	body             io.Reader   // the upstream body being streamed: &chunked, or fasthttp's reader
	chunked          chunkedBody // a chunked upstream body, read straight from upstream.br
	eof              bool
	sawFirstToken    bool // the meter saw the first output token
	pending          error
	status           int // upstream status; 0 until a response header arrived

	// firstTokenDeadline bounds the wait for response headers (read by the
	// transport) and, on streams, for the first output token.
	firstTokenDeadline time.Time

	// Bodies and the budget they hold (body.go, relay.go), and the client
	// write deadline of a body in reader mode.
	serverLimits      *serverLimits // the server block in force when the request arrived
	reqHeld           int64         // budget reserved for the request body
	bodyRead          bool          // the request body was read whole (readRequestBody)
	oneByte           [1]byte       // a body's next byte, read before its buffer grows
	respHeld          int64         // budget reserved for the answer
	relayBody         relay         // reader-mode body of a relayed non-streaming answer
	client            net.Conn
	writeDeadlineNext time.Time // when keepWriting next moves the write deadline
	writeCap          time.Time // latest write deadline while reading upstream; zero: none

	// Telemetry (telemetry.go, spans.go, tracing.go). telemetry is nil
	// when metrics and tracing are off; span is nil when tracing is off,
	// upstreamSpan when the server span does not record.
	telemetry    *providerTelemetry
	span         trace.Span
	upstreamSpan trace.Span
	spanCtx      trace.SpanContext // unsampled without an SDK span: what to propagate
	operation    string            // gen_ai.operation.name; set only for recording spans
	respModel    string            // gen_ai.response.model; set only for recording spans
	wantModel    bool              // capture respModel from the first response bytes
	metered      bool              // meter was reset for this response
	streamed     bool              // the response went out as a stream
}

var streamPool = sync.Pool{New: func() any { return new(stream) }}

func getStream(s *Server, p *provider) *stream {
	st := streamPool.Get().(*stream)
	st.srv, st.prov = s, p
	if p != nil {
		st.errs = p.errs
	}
	return st
}

// put returns st to the pool. Only the owner calls it, after the watcher
// registration is gone and the upstream connection is given back.
func (st *stream) put() {
	st.reset()
	streamPool.Put(st)
}

// reset empties st for its next request.
func (st *stream) reset() {
	st.req.Reset()
	st.resp.Reset()
	st.reqBody, st.respBuf = poolable(st.reqBody), poolable(st.respBuf)
	if len(st.attrs) > 0 || len(st.upstreamAttrs) > 0 {
		clear(st.attrs)
		clear(st.upstreamAttrs)
		st.attrs, st.upstreamAttrs = st.attrs[:0], st.upstreamAttrs[:0]
	}
	st.gone.Store(false)
	st.cut.Store(false)
	st.attachedConn, st.cancelCh = nil, nil
	st.streamState = streamState{}
}

// poolable returns b emptied for reuse, or nil when it is too large to
// keep in the pool.
func poolable(b []byte) []byte {
	if cap(b) > pooledBodyMax {
		return nil
	}
	return b[:0]
}

// waitChan returns a channel closed when the client goes away, for the
// admission queue; nil when it is gone already.
func (st *stream) waitChan() (<-chan struct{}, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gone.Load() {
		return nil, false
	}
	if st.cancelCh == nil {
		st.cancelCh = make(chan struct{})
	}
	return st.cancelCh, true
}

// attachConn publishes the upstream connection so interrupt can close it.
// It returns false (and the caller closes conn) if the stream is gone.
func (st *stream) attachConn(c net.Conn) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gone.Load() {
		return false
	}
	st.attachedConn = c
	return true
}

// detachConn withdraws the connection before it goes back to the pool, so a
// late interrupt cannot close a connection another request now uses.
func (st *stream) detachConn() {
	st.mu.Lock()
	st.attachedConn = nil
	st.mu.Unlock()
}

// interrupt ends the stream from outside: the client went away (cut=false)
// or shutdown's grace period ended (cut=true). It wakes a queued request,
// closes the upstream connection (which also unblocks a pending header read
// or body read), then frees the permit, in that order, so the upstream never
// sees more requests than permits. Safe to call from any goroutine, more
// than once.
func (st *stream) interrupt(cut bool) {
	if cut {
		st.cut.Store(true)
	}
	if !st.gone.CompareAndSwap(false, true) {
		return
	}
	st.mu.Lock()
	if st.cancelCh != nil {
		close(st.cancelCh)
	}
	if st.attachedConn != nil {
		_ = st.attachedConn.Close()
	}
	st.mu.Unlock()
	st.permit.Finish(st.srv.now(), adaptive.Outcome{})
}

// closeUpstream gives the upstream connection back: to the pool when the
// body was read to EOF and the connection is in step (upstreamInStep),
// closed otherwise. Owner only.
func (st *stream) closeUpstream(reuse bool) {
	if st.upstream.put == nil {
		return
	}
	st.detachConn()
	reuse = reuse && st.upstreamInStep()
	_ = st.resp.CloseBodyStream()
	st.upstream.hc.ReleaseReader(st.upstream.br)
	// The request's deadlines stay on a pooled connection: nothing reads or
	// writes it until roundTrip sets new ones.
	st.upstream.put(reuse && !st.resp.ConnectionClose() && !st.gone.Load())
	st.upstream = upstreamConn{}
	st.body = nil
}

// Read implements io.Reader for fasthttp's reader-mode body streaming: each
// call reads what the upstream has sent so far (every complete chunk that
// has arrived, see chunkedBody), meters it, and hands it to fasthttp, which
// writes and flushes it as one chunk: one client write per upstream read.
// It waits only when nothing has arrived. Read never returns data together
// with an error.
func (st *stream) Read(p []byte) (int, error) {
	if st.pending != nil {
		return 0, st.pending
	}
	if len(p) > maxClientChunk {
		p = p[:maxClientChunk]
	}
	n, err := st.body.Read(p)
	now := st.srv.now()
	st.keepWriting(now)
	if n > 0 {
		if st.wantModel {
			st.captureResponseModel(p[:n])
		}
		if sig := st.meter.Write(p[:n], now); sig != 0 {
			st.onSignals(sig, now)
		}
	}
	switch {
	case err == nil:
		st.extendDeadline(now)
		return n, nil
	case errors.Is(err, io.EOF):
		st.eof = true
		if sig := st.meter.Close(now); sig != 0 {
			st.onSignals(sig, now)
		}
		err = io.EOF
	default:
		err = st.readError(err, now)
	}
	if n > 0 {
		st.pending = err
		return n, nil
	}
	return 0, err
}

// extendDeadline moves the upstream read deadline after data arrived: the
// first-token deadline holds until the first output token; after it, a
// stream is cut when nothing came for between 1 and 1 1/8 idle timeouts,
// and never past the total deadline. So that most reads do not move a
// timer, the deadline moves at most every idle/8 (as keepWriting does for
// the client's write deadline).
func (st *stream) extendDeadline(now time.Time) {
	if !st.sawFirstToken || now.Before(st.readDeadlineNext) {
		return
	}
	idle := st.prov.timeouts.Idle
	dl := now.Add(idle + idle/8)
	if dl.After(st.totalDeadline) {
		dl = st.totalDeadline
	}
	_ = st.upstream.conn.SetReadDeadline(dl)
	st.readDeadlineNext = now.Add(idle / 8)
}

// readError says why the upstream body stopped before EOF.
func (st *stream) readError(err error, now time.Time) error {
	switch {
	case st.cut.Load():
		return errShutdownCut
	case st.gone.Load():
		return errClientGone
	case isTimeout(err):
		switch {
		case !st.sawFirstToken && !now.Before(st.firstTokenDeadline):
			st.reportDrop(adaptive.MeaningOf(adaptive.AttemptResult{Failure: adaptive.AttemptTimeout, Class: feedback.ErrTimeout}).Controller, now)
			return errFirstTokenTimeout
		case !now.Before(st.totalDeadline):
			return errTotalTimeout
		default:
			return errIdleTimeout
		}
	}
	return errUpstreamBroke
}

// onSignals turns meter signals into controller samples.
func (st *stream) onSignals(sig feedback.Signal, now time.Time) {
	if sig&feedback.SigFirstToken != 0 {
		st.sawFirstToken = true
		st.firstTokenAt = now
		r := st.meter.Result()
		st.adm.attempt.Observe(control.Sample{
			Kind: control.FirstToken, Now: now, TTFT: r.TTFT, PromptTokens: st.info.PromptTokens,
		})
		st.observeFirstToken(r.TTFT)
		st.extendDeadline(now)
	}
	if sig&feedback.SigRate != 0 {
		st.adm.attempt.Observe(control.Sample{Kind: control.TokenRate, Now: now, Rate: st.meter.RateSample()})
	}
	if sig&feedback.SigError != 0 {
		class := st.meter.Result().ErrorClass
		if !st.pacedRefusal(class) {
			st.reportDrop(adaptive.AnswerMeaning(fasthttp.StatusOK, class).Controller, now)
		}
	}
}

// reportDrop tells the controller the provider signalled congestion in the
// middle of a response, when ctl (the answer table's Controller column for
// what was seen) is a drop. The attempt feeds at most one drop per
// request.
func (st *stream) reportDrop(ctl adaptive.Outcome, now time.Time) {
	if ctl.Kind != adaptive.OutcomeDrop {
		return
	}
	st.adm.attempt.Observe(control.Sample{Kind: control.Dropped, Now: now, Drop: ctl.Drop})
}

// CloseWithError is called by fasthttp exactly once when the response body
// is done: err is nil after EOF, the read error, or the client write error.
// It is where a streamed request ends.
func (st *stream) CloseWithError(err error) error {
	now := st.srv.now()
	o := st.closeOutcome(err)
	var ctl adaptive.Outcome
	if o == outComplete {
		// Its first token, if any, was the success; a stream without one
		// was still served.
		ctl.Kind = adaptive.OutcomeSuccess
	}
	st.srv.end(nil, st, now, o, ctl)
	return nil
}

// closeOutcome is how a body in reader mode ended, from the error fasthttp
// passes to CloseWithError. An error that is not one of Read's own is a
// client write error: a write that timed out is a client that stopped
// reading (client_slow), anything else a client that left.
func (st *stream) closeOutcome(err error) outcome {
	if err != nil && !st.gone.Load() && !errors.Is(err, errIdleTimeout) && !errors.Is(err, errTotalTimeout) &&
		!errors.Is(err, errFirstTokenTimeout) && !errors.Is(err, errUpstreamBroke) && !errors.Is(err, errShutdownCut) {
		if isTimeout(err) {
			return outClientSlow
		}
		st.gone.Store(true)
	}
	return st.streamOutcome(err)
}

// isTimeout reports a deadline that passed on a socket.
func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout)
}

// streamOutcome maps the error fasthttp passes to CloseWithError.
func (st *stream) streamOutcome(err error) outcome {
	switch {
	case err == nil && st.eof:
		return outComplete
	case st.cut.Load() || errors.Is(err, errShutdownCut):
		return outShutdown
	case errors.Is(err, errIdleTimeout):
		return outIdleTimeout
	case errors.Is(err, errTotalTimeout):
		return outTotalTimeout
	case errors.Is(err, errFirstTokenTimeout):
		return outFirstTokenTimeout
	case errors.Is(err, errUpstreamBroke):
		return outUpstreamBroke
	case st.gone.Load() || err != nil:
		return outClientGone
	}
	return outAborted
}
