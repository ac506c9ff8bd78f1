package feedback

import "strconv"

// Anthropic Messages streams.
//
// The event type comes from the event: field, or from the data's "type"
// when the field is absent. content_block_delta is output-bearing when its
// delta.type is text_delta, input_json_delta or thinking_delta (not
// signature_delta). message_start gives usage.input_tokens (its
// output_tokens, a placeholder of 1 or so, is ignored); message_delta gives
// delta.stop_reason and the cumulative usage.output_tokens (the last one
// wins) and sometimes input_tokens; message_stop is terminal; ping is
// ignored; an "error" event is a mid-stream error.

// Anthropic is the Anthropic Messages API (/v1/messages), the only
// dialect of dialect: anthropic.
var Anthropic = registerDialect(&DialectSpec{
	Name:    "anthropic",
	Family:  "anthropic",
	Default: true,
	Paths:   []string{"/v1/messages"},
	Meter:   (*Meter).anthropicEvent,
	ErrorTypes: [NumErrorTypes]string{
		ErrTypeInvalidRequest: "invalid_request_error",
		ErrTypeNotFound:       "not_found_error",
		ErrTypeTooLarge:       "request_too_large",
		ErrTypeRateLimit:      "rate_limit_error",
		ErrTypeOverloaded:     "overloaded_error",
		ErrTypeServer:         "api_error",
		ErrTypeTimeout:        "timeout_error",
		ErrTypeAuthentication: "authentication_error",
		ErrTypePermission:     "permission_error",
	},
	ErrorBody:       anthropicError,
	RateLimitPrefix: anthropicPrefix,
	AuthHeader:      "x-api-key",
})

// anthropicError renders an error in Anthropic's shape,
// {"type":"error","error":{"type","message"}}; it has no code.
func anthropicError(msg, typ, _ string) []byte {
	b := []byte(`{"type":"error","error":{"type":`)
	b = strconv.AppendQuote(b, typ)
	b = append(b, `,"message":`...)
	b = strconv.AppendQuote(b, msg)
	return append(b, `}}`...)
}

func (m *Meter) anthropicEvent(typ, data []byte, truncated bool) {
	var tbuf [maxEventType]byte
	if len(typ) == 0 || string(typ) == "message" {
		if truncated {
			return
		}
		typ = topType(data, tbuf[:])
	}
	switch string(typ) {
	case "content_block_delta":
		if truncated || anthropicDeltaOutput(data) {
			m.delta()
		}
	case "message_start":
		if !truncated {
			m.anthropicStart(data)
		}
	case "message_delta":
		if !truncated {
			m.anthropicMessageDelta(data)
		}
	case "message_stop":
		m.setDone()
	case "error":
		m.setError(streamErrorClass(data, truncated))
	}
}

// anthropicDeltaOutput reports whether a content_block_delta bears output.
// It stops reading at delta.type, before the (long) text.
func anthropicDeltaOutput(data []byte) bool {
	c, _ := openObject(data, 0)
	for c.next(nil) {
		if string(c.key()) != "delta" {
			continue
		}
		d := c.members()
		for d.next(&c) {
			if string(d.key()) != "type" {
				continue
			}
			s, ok := d.str()
			if !ok {
				continue
			}
			var buf [32]byte
			s, _ = decodeStr(s, buf[:])
			switch string(s) {
			case "text_delta", "input_json_delta", "thinking_delta":
				return true
			}
			return false
		}
	}
	return false
}

// anthropicStart reads message.usage.input_tokens from message_start.
func (m *Meter) anthropicStart(data []byte) {
	c, _ := openObject(data, 0)
	for c.next(nil) {
		if string(c.key()) != "message" {
			continue
		}
		msg := c.members()
		for msg.next(&c) {
			if string(msg.key()) == "usage" {
				if u := readUsage(&msg); u.hasIn {
					m.usageIn = u.in
				}
			}
		}
	}
}

// anthropicMessageDelta reads delta.stop_reason and usage from
// message_delta.
func (m *Meter) anthropicMessageDelta(data []byte) {
	c, _ := openObject(data, 0)
	for c.next(nil) {
		switch string(c.key()) {
		case "usage":
			m.setUsage(readUsage(&c))
		case "delta":
			d := c.members()
			for d.next(&c) {
				if string(d.key()) == "stop_reason" {
					if s, ok := d.str(); ok {
						m.setFinish(s)
					}
				}
			}
		}
	}
}
