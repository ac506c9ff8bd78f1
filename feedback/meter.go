package feedback

import "time"

// rateWindow is the number of output deltas per mid-stream rate sample.
const rateWindow = 32

// Signal is a set of things a Write, Close or MeterJSON call observed, for
// callers that react at once (report success at first token, check the
// token-rate floor, release on a terminal event). Zero means nothing new.
type Signal uint8

const (
	// SigFirstToken: this call produced the first output-bearing delta.
	SigFirstToken Signal = 1 << iota
	// SigRate: a mid-stream token-rate sample is ready (every 32 output
	// deltas after the first token, once time has advanced); read it with
	// RateSample.
	SigRate
	// SigError: an error event was seen; its class is in
	// Result().ErrorClass.
	SigError
	// SigDone: a terminal event was seen ([DONE], message_stop,
	// response.completed, response.incomplete or response.failed).
	SigDone
)

// Result is what a Meter learned about one response. Zero fields mean "not
// seen": a zero TTFT with FirstToken false means no output arrived.
type Result struct {
	FirstToken bool
	// TTFT is from the start passed to Reset to the Write that completed
	// the first output-bearing event (for MeterJSON: to the body). Never
	// negative.
	TTFT time.Duration
	// OutputTokens is the provider's usage count when the stream or body
	// carried one (TokensFromUsage), else the number of output deltas.
	OutputTokens    int
	TokensFromUsage bool
	// InputTokens is the provider's prompt/input token count, 0 if absent.
	InputTokens int
	// Deltas counts output-bearing events.
	Deltas int
	// DecodeTime is from the first to the last output delta.
	DecodeTime time.Duration
	// TokenRate is (Deltas-1)/DecodeTime in tokens per second over the
	// whole stream; 0 with fewer than 2 deltas or no elapsed time.
	TokenRate float64
	// FinishReason is the provider's finish/stop reason or the Responses
	// terminal status. Known values are constants (no allocation); an
	// unknown value is copied once, cut to 64 bytes.
	FinishReason string
	// ErrorClass is the class of the first error carried in the stream or
	// body (ErrNone if none).
	ErrorClass ErrorClass
	// Done reports that a terminal event was seen (or, for MeterJSON, that
	// the body was a complete non-error response).
	Done bool

	// Events counts dispatched SSE events, SkippedLines the lines dropped
	// for exceeding 1 MiB, Bytes all bytes written (or metered by
	// MeterJSON).
	Events       int
	SkippedLines int
	Bytes        int64
}

// Meter measures one response at a time, incrementally. Use it from one
// goroutine; reuse it across requests with Reset. The zero value is ready
// to use as if Reset(OpenAIChat, time.Time{}) had been called.
//
// In steady state (buffers grown by earlier streams) Write, Close, Result
// and RateSample do not allocate; the only allocation is copying an
// unknown finish reason. Lines longer than 1 MiB are skipped (see
// Result.SkippedLines) so a stream cannot make the Meter grow without
// bound; buffers over 64 KiB are released by Reset.
type Meter struct {
	sse   sseParser
	meter func(m *Meter, typ, data []byte, truncated bool) // the dialect's
	start time.Time
	now   time.Time // time of the current call
	sig   Signal    // signals raised by the current call

	first           bool
	firstAt, lastAt time.Time
	deltas          int

	rateMark  time.Time
	rateCount int
	rate      float64

	usageOut, usageIn int
	fromUsage         bool
	finish            string
	errClass          ErrorClass
	done              bool
	events            int
	bytes             int64
}

// Reset prepares m for a new response in dialect d. start is when the
// request was sent upstream; TTFT is measured from it.
func (m *Meter) Reset(d Dialect, start time.Time) {
	sse := m.sse
	sse.reset()
	*m = Meter{sse: sse, meter: d.Spec().Meter, start: start}
}

// Write meters p, the next bytes of an SSE body exactly as forwarded to the
// client; p may split lines and events anywhere and is not retained. now is
// when p arrived. It returns the signals raised by the events p completed.
func (m *Meter) Write(p []byte, now time.Time) Signal {
	m.now, m.sig = now, 0
	m.bytes += int64(len(p))
	m.sse.write(p, m)
	return m.sig
}

// Close ends the stream at EOF: a final line or event lacking its line
// ending or blank line is still counted. Writing after Close starts a new
// event sequence in the same Result; call Reset for a new response.
func (m *Meter) Close(now time.Time) Signal {
	m.now, m.sig = now, 0
	m.sse.close(m)
	return m.sig
}

// RateSample returns the latest mid-stream token rate in tokens per second:
// the output deltas since the previous sample (at least 32) over the time
// they took. It is 0 until the first SigRate.
func (m *Meter) RateSample() (tokensPerSecond float64) { return m.rate }

// Result returns what has been measured so far.
func (m *Meter) Result() Result {
	r := Result{
		FirstToken:   m.first,
		OutputTokens: m.deltas,
		InputTokens:  m.usageIn,
		Deltas:       m.deltas,
		FinishReason: m.finish,
		ErrorClass:   m.errClass,
		Done:         m.done,
		Events:       m.events,
		SkippedLines: m.sse.skipped,
		Bytes:        m.bytes,
	}
	if m.first {
		r.TTFT = max(m.firstAt.Sub(m.start), 0)
		r.DecodeTime = max(m.lastAt.Sub(m.firstAt), 0)
	}
	if m.fromUsage {
		r.OutputTokens, r.TokensFromUsage = m.usageOut, true
	}
	if m.deltas >= 2 && r.DecodeTime > 0 {
		r.TokenRate = float64(m.deltas-1) / r.DecodeTime.Seconds()
	}
	return r
}

// event implements eventSink: one SSE event, routed by dialect.
func (m *Meter) event(typ, data []byte, truncated bool) {
	m.events++
	if m.meter == nil { // the zero Meter
		m.meter = OpenAIChat.Spec().Meter
	}
	m.meter(m, typ, data, truncated)
}

// delta records one output-bearing event at m.now.
func (m *Meter) delta() {
	m.deltas++
	now := m.now
	if !m.first {
		m.first = true
		m.firstAt, m.lastAt, m.rateMark = now, now, now
		m.sig |= SigFirstToken
		return
	}
	m.lastAt = now
	m.rateCount++
	if m.rateCount >= rateWindow {
		// Deltas delivered in one write share a timestamp: wait for
		// time to move rather than report an infinite rate.
		if el := now.Sub(m.rateMark); el > 0 {
			m.rate = float64(m.rateCount) / el.Seconds()
			m.rateMark, m.rateCount = now, 0
			m.sig |= SigRate
		}
	}
}

func (m *Meter) setDone() {
	m.done = true
	m.sig |= SigDone
}

// setError records an error; the first class seen is kept.
func (m *Meter) setError(c ErrorClass) {
	if c == ErrNone {
		c = ErrOther
	}
	if m.errClass == ErrNone {
		m.errClass = c
	}
	m.sig |= SigError
}

func (m *Meter) setUsage(u usage) {
	if u.hasOut {
		m.usageOut, m.fromUsage = u.out, true
	}
	if u.hasIn {
		m.usageIn = u.in
	}
}

func (m *Meter) setFinish(raw []byte) {
	m.finish = finishReason(raw, m.finish)
}

// knownFinish lists finish reasons returned without allocating.
var knownFinish = [...]string{
	"stop", "length", "tool_calls", "content_filter", "function_call",
	"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal",
	"completed", "incomplete", "failed",
}

// finishReason maps a raw JSON string to a finish reason, allocating only
// for an unknown value that differs from prev.
func finishReason(raw []byte, prev string) string {
	var buf [64]byte
	s, _ := decodeStr(raw, buf[:])
	for _, k := range knownFinish {
		if string(s) == k {
			return k
		}
	}
	if len(s) > 64 {
		s = s[:64]
	}
	if string(s) == prev {
		return prev
	}
	return string(s)
}

// usage is a provider usage object.
type usage struct {
	in, out       int
	hasIn, hasOut bool
}

// readUsage reads a usage object at the cursor's value (either naming:
// prompt_tokens/completion_tokens or input_tokens/output_tokens). A null or
// non-object value yields the zero usage. Negative counts read as 0.
func readUsage(c *cursor) usage {
	var u usage
	o := c.members()
	for o.next(c) {
		switch string(o.key()) {
		case "completion_tokens", "output_tokens":
			if n, ok := o.int(); ok {
				u.out, u.hasOut = max(n, 0), true
			}
		case "prompt_tokens", "input_tokens":
			if n, ok := o.int(); ok {
				u.in, u.hasIn = max(n, 0), true
			}
		}
	}
	return u
}

// topType returns the decoded top-level "type" string of a JSON object, in
// buf when it had escapes; nil if absent.
func topType(data, buf []byte) []byte {
	c, _ := openObject(data, 0)
	for c.next(nil) {
		if string(c.key()) == "type" {
			s, ok := c.str()
			if !ok {
				return nil
			}
			s, _ = decodeStr(s, buf)
			return s
		}
	}
	return nil
}
