package feedback

// OpenAI Responses API streams.
//
// The event type comes from the event: field, or from the data's "type"
// when the field is absent. Output-bearing types are listed in
// responsesOutput. response.completed, response.incomplete and
// response.failed are terminal: their response.usage gives the counts and
// the event name gives the finish reason ("completed", "incomplete",
// "failed"); response.failed also carries response.error, a mid-stream
// error. An "error" event is a mid-stream error (not terminal).

// OpenAIResponses is the OpenAI Responses API (/v1/responses); its
// errors and headers are OpenAI's.
var OpenAIResponses = registerDialect(&DialectSpec{
	Name:            "openai_responses",
	Family:          "openai",
	Paths:           []string{"/v1/responses"},
	Meter:           (*Meter).responsesEvent,
	ErrorTypes:      OpenAIChat.Spec().ErrorTypes,
	ErrorBody:       openAIError,
	RateLimitPrefix: openAIPrefix,
	AuthHeader:      "bearer",
})

// responsesOutput reports whether an event type bears output tokens.
func responsesOutput(typ []byte) bool {
	switch string(typ) {
	case "response.output_text.delta",
		"response.function_call_arguments.delta",
		"response.reasoning_summary_text.delta",
		"response.reasoning_text.delta",
		"response.refusal.delta":
		return true
	}
	return false
}

func (m *Meter) responsesEvent(typ, data []byte, truncated bool) {
	var tbuf [maxEventType]byte
	if len(typ) == 0 || string(typ) == "message" {
		if truncated {
			return
		}
		typ = topType(data, tbuf[:])
	}
	if responsesOutput(typ) {
		m.delta()
		return
	}
	switch string(typ) {
	case "response.completed":
		m.responsesTerminal(data, truncated, "completed")
	case "response.incomplete":
		m.responsesTerminal(data, truncated, "incomplete")
	case "response.failed":
		m.responsesTerminal(data, truncated, "failed")
	case "error":
		m.setError(streamErrorClass(data, truncated))
	}
}

// responsesTerminal reads a terminal event's response object.
func (m *Meter) responsesTerminal(data []byte, truncated bool, finish string) {
	m.finish = finish
	m.setDone()
	failed := finish == "failed"
	if truncated {
		if failed {
			m.setError(ErrOther)
		}
		return
	}
	var e errInfo
	c, _ := openObject(data, 0)
	for c.next(nil) {
		if string(c.key()) != "response" {
			continue
		}
		r := c.members()
		for r.next(&c) {
			switch string(r.key()) {
			case "usage":
				m.setUsage(readUsage(&r))
			case "error":
				e.observe(&r)
			}
		}
	}
	if failed || e.found {
		m.setError(e.streamClass())
	}
}
