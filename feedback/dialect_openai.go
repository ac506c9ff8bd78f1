package feedback

import "strconv"

// OpenAI Chat Completions streams (and OpenAI-compatible servers).
//
// An event is output-bearing when any choice has a non-empty
// delta.content, delta.reasoning_content, delta.reasoning, delta.refusal,
// delta.tool_calls[].function.arguments, or (completions-style) text. The
// role-only first chunk is not. usage (when not null) gives the counts;
// the last one seen wins. "data: [DONE]" is terminal. An error object in
// the data, or an "error" event type, is a mid-stream error.

// OpenAIChat is /v1/chat/completions and OpenAI-compatible servers
// (vLLM, SGLang, llama.cpp, Ollama, ...), including /v1/completions style
// streams whose choices carry "text": the default of dialect: openai and
// of dialect: auto.
var OpenAIChat = registerDialect(&DialectSpec{
	Name:    "openai_chat",
	Family:  "openai",
	Default: true,
	Meter:   (*Meter).chatEvent,
	ErrorTypes: [NumErrorTypes]string{
		ErrTypeInvalidRequest: "invalid_request_error",
		ErrTypeNotFound:       "invalid_request_error",
		ErrTypeTooLarge:       "invalid_request_error",
		ErrTypeRateLimit:      "rate_limit_error",
		ErrTypeOverloaded:     "server_error",
		ErrTypeServer:         "server_error",
		ErrTypeTimeout:        "timeout_error",
		// OpenAI answers an unknown key with 401 invalid_request_error
		// (code invalid_api_key), and a key without access with 403.
		ErrTypeAuthentication: "invalid_request_error",
		ErrTypePermission:     "invalid_request_error",
	},
	ErrorBody:       openAIError,
	RateLimitPrefix: openAIPrefix,
	AuthHeader:      "bearer",
})

// openAIError renders an error in OpenAI's shape,
// {"error":{"message","type","param","code"}}.
func openAIError(msg, typ, code string) []byte {
	b := []byte(`{"error":{"message":`)
	b = strconv.AppendQuote(b, msg)
	b = append(b, `,"type":`...)
	b = strconv.AppendQuote(b, typ)
	b = append(b, `,"param":null,"code":`...)
	b = strconv.AppendQuote(b, code)
	return append(b, `}}`...)
}

func (m *Meter) chatEvent(typ, data []byte, truncated bool) {
	isErrEvent := string(typ) == "error"
	if truncated {
		// The payload is too large to read: count it as output unless it
		// was typed as something else.
		if isErrEvent {
			m.setError(ErrOther)
		} else if len(typ) == 0 || string(typ) == "message" {
			m.delta()
		}
		return
	}
	d := trimWS(data)
	if string(d) == "[DONE]" {
		m.setDone()
		return
	}
	c, ok := openObject(d, 0)
	if !ok {
		if isErrEvent {
			m.setError(classifyMessage(d))
		}
		return
	}
	output := false
	var e errInfo
	for c.next(nil) {
		switch string(c.key()) {
		case "choices":
			if m.chatChoices(&c) {
				output = true
			}
		case "usage":
			m.setUsage(readUsage(&c))
		default:
			e.observe(&c)
		}
	}
	if output {
		m.delta()
	}
	if e.found || isErrEvent {
		m.setError(e.streamClass())
	}
}

// chatChoices walks a choices array, recording finish reasons, and reports
// whether any choice bore output.
func (m *Meter) chatChoices(c *cursor) bool {
	output := false
	arr := c.elements()
	for arr.nextElem(c) {
		ch := arr.members()
		for ch.next(&arr) {
			switch string(ch.key()) {
			case "delta":
				if chatDeltaOutput(&ch) {
					output = true
				}
			case "text":
				if s, ok := ch.str(); ok && len(s) > 0 {
					output = true
				}
			case "finish_reason":
				if s, ok := ch.str(); ok {
					m.setFinish(s)
				}
			}
		}
	}
	return output
}

// chatDeltaOutput reports whether a choice's delta object bears output.
func chatDeltaOutput(c *cursor) bool {
	output := false
	d := c.members()
	for d.next(c) {
		switch string(d.key()) {
		case "content", "reasoning_content", "reasoning", "refusal":
			if s, ok := d.str(); ok && len(s) > 0 {
				output = true
			}
		case "tool_calls":
			if toolCallsOutput(&d) {
				output = true
			}
		}
	}
	return output
}

// toolCallsOutput reports whether any tool call carries a non-empty
// function.arguments fragment.
func toolCallsOutput(c *cursor) bool {
	output := false
	arr := c.elements()
	for arr.nextElem(c) {
		tc := arr.members()
		for tc.next(&arr) {
			if string(tc.key()) != "function" {
				continue
			}
			fn := tc.members()
			for fn.next(&tc) {
				if string(fn.key()) == "arguments" {
					if s, ok := fn.str(); ok && len(s) > 0 {
						output = true
					}
				}
			}
		}
	}
	return output
}
