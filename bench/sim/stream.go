package sim

import (
	"io"
	"time"
)

// Stream phases.
const (
	phQueued  = iota // waiting for a slot
	phPrefill        // running, before the first token
	phDecode         // producing tokens
	phTail           // last events queued; EOF next
	phDone
)

// streamBody is the response body of a streaming request, in fasthttp's
// reader mode (Response.SetBodyStream with size -1). fasthttp writes and
// flushes each Read as one chunk, and Read returns exactly one SSE event (or
// the rest of one larger than the buffer), so every event is flushed on its
// own. Read sleeps for queueing, prefill and inter-token latency.
//
// Why reader mode rather than SetBodyStreamWriter: a Read error makes
// fasthttp drop the connection without the chunked terminator, which is
// exactly reset-mid-stream; and CloseWithError is one place where the
// request ends with the reason (nil, the downstream write error, or ours),
// without the writer mode's pipe goroutine.
//
// fasthttp calls Read and then CloseWithError from one goroutine, never
// concurrently, so streamBody needs no lock of its own.
type streamBody struct {
	r       *request
	phase   int
	pending []event  // events ready to write, in order
	off     int      // bytes of pending[0] already returned
	held    [][]byte // start events held back by silent headers
	events  int      // events fully handed to fasthttp
	tokens  int      // token events produced
	sent    int      // token events fully handed to fasthttp
	next    time.Time
}

// event is one SSE event waiting to be written.
type event struct {
	b     []byte
	token bool
}

func (b *streamBody) queue(evs [][]byte) {
	for _, ev := range evs {
		b.pending = append(b.pending, event{b: ev})
	}
}

func (b *streamBody) queueToken() {
	b.pending = append(b.pending, event{b: b.r.enc.token(), token: true})
	b.tokens++
}

// Read implements io.Reader; see streamBody.
func (b *streamBody) Read(p []byte) (int, error) {
	r := b.r
	for {
		if len(b.pending) > 0 {
			if r.fault == FaultReset && b.off == 0 && b.events >= r.faultAfter {
				return 0, b.reset()
			}
			ev := b.pending[0]
			n := copy(p, ev.b[b.off:])
			b.off += n
			if b.off == len(ev.b) {
				if ev.token {
					b.sent++
					if b.sent == 1 {
						r.s.firstToken(time.Since(r.at))
					}
				}
				b.pending[0] = event{}
				b.pending = b.pending[1:]
				b.off = 0
				b.events++
			}
			return n, nil
		}
		switch b.phase {
		case phQueued:
			if err := r.waitSlot(); err != nil {
				return 0, err
			}
			b.next = time.Now().Add(r.firstTokenDelay())
			if r.silent {
				b.held = r.enc.start()
			} else {
				b.queue(r.enc.start())
			}
			b.phase = phPrefill
		case phPrefill:
			if err := r.sleepUntil(b.next); err != nil {
				return 0, err
			}
			b.queue(b.held)
			b.queue(r.enc.first())
			b.held = nil
			b.phase = phDecode
			if r.output > 0 {
				b.queueToken()
			}
		case phDecode:
			if b.tokens >= r.output {
				r.s.release(&r.t) // decoding is over: free the slot first
				b.queue(r.enc.end(b.tokens))
				b.phase = phTail
				continue
			}
			b.next = b.next.Add(r.tokenDelay())
			if err := r.sleepBetweenTokens(b.next); err != nil {
				return 0, err
			}
			b.queueToken()
		case phTail:
			if r.fault == FaultReset {
				// Fewer events than faultAfter: drop before the terminator.
				return 0, b.reset()
			}
			b.phase = phDone
			return 0, io.EOF
		default:
			return 0, io.EOF
		}
	}
}

func (b *streamBody) reset() error {
	b.r.s.count(func(st *Stats) { st.Resets++ })
	return errReset
}

// CloseWithError implements fasthttp.ReadCloserWithError: fasthttp calls it
// once when the response ends, with nil after EOF, the error Read returned,
// or the error writing to the client. It ends the request: frees its slot
// or queue place and counts the outcome.
func (b *streamBody) CloseWithError(err error) error {
	r := b.r
	r.stopTimer()
	o := outcomeOf(err)
	if err == nil && b.phase != phDone {
		o = outDisconnect // closed before the end without an error
	}
	tokens := uint64(b.sent)
	r.s.count(func(st *Stats) { st.OutputTokens += tokens })
	r.s.finish(&r.t, o)
	return nil
}
