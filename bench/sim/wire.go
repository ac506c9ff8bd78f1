package sim

import (
	"encoding/json"
	"strconv"
	"strings"
)

// tokenText is the text of every output token, so a client can count
// tokens by counting deltas.
const tokenText = "tok "

// encoder renders one request's SSE events and non-stream body in its
// dialect, byte for byte as shared/providers.md describes. Not safe for
// concurrent use (Responses events carry a running sequence_number).
type encoder struct {
	dialect      Dialect
	id           string // chatcmpl-sim-N, msg_sim_N or resp_sim_N
	itemID       string // Responses output item id
	created      int64  // Unix seconds
	model        string // JSON string literal, quotes included
	prompt       int
	includeUsage bool // OpenAI stream_options.include_usage
	length       bool // output stopped by max_tokens
	seq          int  // Responses sequence_number of the next event

	chunkHead  string // OpenAI chunk prefix up to "choices":[
	chunkTail  string // OpenAI chunk suffix after the choices array
	tokenEvent []byte // the token event, rendered once (not for Responses)
}

func newEncoder(d Dialect, n uint64, created int64, modelJSON string, prompt int, includeUsage, length bool) *encoder {
	e := &encoder{dialect: d, created: created, model: modelJSON, prompt: prompt, includeUsage: includeUsage, length: length}
	num := strconv.FormatUint(n, 10)
	switch d {
	case OpenAI:
		e.id = "chatcmpl-sim-" + num
		e.chunkHead = `data: {"id":"` + e.id + `","object":"chat.completion.chunk","created":` +
			strconv.FormatInt(created, 10) + `,"model":` + modelJSON + `,"choices":[`
		e.chunkTail = "]}\n\n"
		if includeUsage {
			// With include_usage, OpenAI sends "usage":null on every chunk
			// but the last.
			e.chunkTail = `],"usage":null}` + "\n\n"
		}
	case Anthropic:
		e.id = "msg_sim_" + num
	case Responses:
		e.id = "resp_sim_" + num
		e.itemID = "msg_sim_" + num
	}
	return e
}

// start returns the events sent when the request starts running, before
// prefill: Anthropic message_start, content_block_start and ping; Responses
// created, in_progress, output_item.added and content_part.added. OpenAI
// sends nothing until the first token.
func (e *encoder) start() [][]byte {
	switch e.dialect {
	case Anthropic:
		return [][]byte{
			anthropicEvent("message_start", `{"type":"message_start","message":{"id":"`+e.id+
				`","type":"message","role":"assistant","model":`+e.model+
				`,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`+
				strconv.Itoa(e.prompt)+`,"output_tokens":1}}}`),
			anthropicEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
			anthropicEvent("ping", `{"type": "ping"}`),
		}
	case Responses:
		resp := e.responseObject("in_progress", "", 0)
		return [][]byte{
			e.responsesEvent("response.created", `"response":`+resp),
			e.responsesEvent("response.in_progress", `"response":`+resp),
			e.responsesEvent("response.output_item.added", `"output_index":0,"item":`+e.item("in_progress", -1)),
			e.responsesEvent("response.content_part.added", `"item_id":"`+e.itemID+
				`","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`),
		}
	}
	return nil
}

// first returns events sent right before the first token: the OpenAI
// role chunk (delta.role with empty content, not a token).
func (e *encoder) first() [][]byte {
	if e.dialect == OpenAI {
		return [][]byte{[]byte(e.chunkHead + `{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}` + e.chunkTail)}
	}
	return nil
}

// token returns the event carrying one output token. For OpenAI and
// Anthropic it is the same slice every time; callers must not modify it.
func (e *encoder) token() []byte {
	if e.tokenEvent != nil {
		return e.tokenEvent
	}
	switch e.dialect {
	case OpenAI:
		e.tokenEvent = []byte(e.chunkHead + `{"index":0,"delta":{"content":"` + tokenText + `"},"finish_reason":null}` + e.chunkTail)
		return e.tokenEvent
	case Anthropic:
		e.tokenEvent = anthropicEvent("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+tokenText+`"}}`)
		return e.tokenEvent
	default:
		return e.responsesEvent("response.output_text.delta", `"item_id":"`+e.itemID+
			`","output_index":0,"content_index":0,"delta":"`+tokenText+`"`)
	}
}

// end returns the events after the last of n tokens.
func (e *encoder) end(n int) [][]byte {
	switch e.dialect {
	case OpenAI:
		finish := "stop"
		if e.length {
			finish = "length"
		}
		evs := [][]byte{[]byte(e.chunkHead + `{"index":0,"delta":{},"finish_reason":"` + finish + `"}` + e.chunkTail)}
		if e.includeUsage {
			evs = append(evs, []byte(strings.TrimSuffix(e.chunkHead, `"choices":[`)+`"choices":[],"usage":`+e.openAIUsage(n)+"}\n\n"))
		}
		return append(evs, []byte("data: [DONE]\n\n"))
	case Anthropic:
		stop := "end_turn"
		if e.length {
			stop = "max_tokens"
		}
		return [][]byte{
			anthropicEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
			anthropicEvent("message_delta", `{"type":"message_delta","delta":{"stop_reason":"`+stop+
				`","stop_sequence":null},"usage":{"output_tokens":`+strconv.Itoa(n)+`}}`),
			anthropicEvent("message_stop", `{"type":"message_stop"}`),
		}
	default:
		text := strings.Repeat(tokenText, n)
		part := `{"type":"output_text","text":"` + text + `","annotations":[]}`
		status, terminal := "completed", "response.completed"
		if e.length {
			status, terminal = "incomplete", "response.incomplete"
		}
		itemStatus := "completed"
		if e.length {
			itemStatus = "incomplete"
		}
		return [][]byte{
			e.responsesEvent("response.output_text.done", `"item_id":"`+e.itemID+
				`","output_index":0,"content_index":0,"text":"`+text+`"`),
			e.responsesEvent("response.content_part.done", `"item_id":"`+e.itemID+
				`","output_index":0,"content_index":0,"part":`+part),
			e.responsesEvent("response.output_item.done", `"output_index":0,"item":`+e.item(itemStatus, n)),
			e.responsesEvent(terminal, `"response":`+e.responseObject(status, e.item(itemStatus, n), n)),
		}
	}
}

// body returns the non-stream response body for n tokens.
func (e *encoder) body(n int) []byte {
	text := strings.Repeat(tokenText, n)
	switch e.dialect {
	case OpenAI:
		finish := "stop"
		if e.length {
			finish = "length"
		}
		return []byte(`{"id":"` + e.id + `","object":"chat.completion","created":` + strconv.FormatInt(e.created, 10) +
			`,"model":` + e.model + `,"choices":[{"index":0,"message":{"role":"assistant","content":"` + text +
			`","refusal":null},"logprobs":null,"finish_reason":"` + finish + `"}],"usage":` + e.openAIUsage(n) + `}`)
	case Anthropic:
		stop := "end_turn"
		if e.length {
			stop = "max_tokens"
		}
		return []byte(`{"id":"` + e.id + `","type":"message","role":"assistant","model":` + e.model +
			`,"content":[{"type":"text","text":"` + text + `"}],"stop_reason":"` + stop +
			`","stop_sequence":null,"usage":{"input_tokens":` + strconv.Itoa(e.prompt) +
			`,"output_tokens":` + strconv.Itoa(n) + `}}`)
	default:
		status := "completed"
		if e.length {
			status = "incomplete"
		}
		return []byte(e.responseObject(status, e.item(status, n), n))
	}
}

func (e *encoder) openAIUsage(n int) string {
	return `{"prompt_tokens":` + strconv.Itoa(e.prompt) + `,"completion_tokens":` + strconv.Itoa(n) +
		`,"total_tokens":` + strconv.Itoa(e.prompt+n) + `,"prompt_tokens_details":{"cached_tokens":0}}`
}

// item renders the Responses output message; n < 0 means no content yet.
func (e *encoder) item(status string, n int) string {
	content := "[]"
	if n >= 0 {
		content = `[{"type":"output_text","text":"` + strings.Repeat(tokenText, n) + `","annotations":[]}]`
	}
	return `{"id":"` + e.itemID + `","type":"message","status":"` + status + `","role":"assistant","content":` + content + `}`
}

// responseObject renders a Responses "response" object; item "" means no
// output yet (and usage null).
func (e *encoder) responseObject(status, item string, n int) string {
	output, usage, incomplete := "[]", "null", "null"
	if item != "" {
		output = "[" + item + "]"
		usage = `{"input_tokens":` + strconv.Itoa(e.prompt) + `,"input_tokens_details":{"cached_tokens":0},"output_tokens":` +
			strconv.Itoa(n) + `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":` + strconv.Itoa(e.prompt+n) + `}`
	}
	if status == "incomplete" {
		incomplete = `{"reason":"max_output_tokens"}`
	}
	return `{"id":"` + e.id + `","object":"response","created_at":` + strconv.FormatInt(e.created, 10) +
		`,"status":"` + status + `","model":` + e.model + `,"output":` + output +
		`,"incomplete_details":` + incomplete + `,"usage":` + usage + `}`
}

func (e *encoder) responsesEvent(typ, fields string) []byte {
	ev := "event: " + typ + "\ndata: {\"type\":\"" + typ + "\",\"sequence_number\":" + strconv.Itoa(e.seq) + "," + fields + "}\n\n"
	e.seq++
	return []byte(ev)
}

func anthropicEvent(typ, data string) []byte {
	return []byte("event: " + typ + "\ndata: " + data + "\n\n")
}

// errorBody renders an error in the dialect's JSON shape. typ is the OpenAI
// "type" or Anthropic error.type; code is the OpenAI "code" ("" for null).
func errorBody(d Dialect, typ, code, msg string) []byte {
	if d == Anthropic {
		return []byte(`{"type":"error","error":{"type":"` + typ + `","message":` + jsonString(msg) + `}}`)
	}
	c := "null"
	if code != "" {
		c = `"` + code + `"`
	}
	return []byte(`{"error":{"message":` + jsonString(msg) + `,"type":"` + typ + `","param":null,"code":` + c + `}}`)
}

// jsonString returns s as a JSON string literal.
func jsonString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}
