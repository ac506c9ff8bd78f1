package feedback

import "time"

// MeterJSON meters a non-streaming JSON response body of any dialect:
// usage (prompt_tokens/completion_tokens or input_tokens/output_tokens),
// the finish reason (choices[].finish_reason, Anthropic stop_reason, or the
// Responses status completed/incomplete/failed) and an error object
// (ErrorClass; a Responses status of "failed" is an error too). For a
// non-error JSON object the response counts as one whole: FirstToken and
// Done are set, TTFT is now minus the start given to Reset, and Deltas
// stays 0 (OutputTokens is then the usage count, or 0). A body that is not
// a JSON object changes nothing but Result.Bytes. It does not allocate
// except to copy an unknown finish reason.
func (m *Meter) MeterJSON(body []byte, now time.Time) {
	m.now = now
	m.bytes += int64(len(body))
	c, ok := openObject(body, 0)
	if !ok {
		return
	}
	var e errInfo
	failed := false
	for c.next(nil) {
		switch string(c.key()) {
		case "usage":
			m.setUsage(readUsage(&c))
		case "choices":
			m.jsonChoices(&c)
		case "stop_reason":
			if s, ok := c.str(); ok {
				m.setFinish(s)
			}
		case "status":
			if s, ok := c.str(); ok {
				switch string(s) {
				case "completed", "incomplete", "failed":
					m.setFinish(s)
					failed = string(s) == "failed"
				}
			}
		default:
			e.observe(&c)
		}
	}
	if e.found || failed {
		m.setError(e.streamClass())
		return
	}
	if !m.first {
		m.first = true
		m.firstAt, m.lastAt = now, now
	}
	m.done = true
}

// jsonChoices records the finish reason of a non-stream choices array (the
// last non-null one wins).
func (m *Meter) jsonChoices(c *cursor) {
	arr := c.elements()
	for arr.nextElem(c) {
		ch := arr.members()
		for ch.next(&arr) {
			if string(ch.key()) == "finish_reason" {
				if s, ok := ch.str(); ok {
					m.setFinish(s)
				}
			}
		}
	}
}
