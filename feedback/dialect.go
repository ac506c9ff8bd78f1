package feedback

import "bytes"

// Dialect is the wire format of a provider API: which request keys carry
// what, which streaming events bear output tokens and where usage is
// reported. The zero value is not a valid dialect; a Meter given the zero
// Dialect treats the stream as OpenAIChat.
type Dialect uint8

const (
	// OpenAIChat is /v1/chat/completions and OpenAI-compatible servers
	// (vLLM, SGLang, llama.cpp, Ollama, ...), including /v1/completions
	// style streams whose choices carry "text".
	OpenAIChat Dialect = iota + 1
	// OpenAIResponses is the OpenAI Responses API (/v1/responses).
	OpenAIResponses
	// Anthropic is the Anthropic Messages API (/v1/messages).
	Anthropic
)

// String returns a stable lower-case name usable as a metric label:
// "openai_chat", "openai_responses", "anthropic", or "unknown".
func (d Dialect) String() string {
	switch d {
	case OpenAIChat:
		return "openai_chat"
	case OpenAIResponses:
		return "openai_responses"
	case Anthropic:
		return "anthropic"
	}
	return "unknown"
}

// DialectForPath picks the dialect from a request path. It is tolerant of
// route prefixes: a path containing the segment "/v1/messages" is Anthropic,
// one containing "/v1/responses" is OpenAIResponses (the match must end at
// the end of the path, a '/' or a '?'); anything else, including an empty
// path, is OpenAIChat. A query string is not searched. It does not allocate.
func DialectForPath(path []byte) Dialect {
	if q := bytes.IndexByte(path, '?'); q >= 0 {
		path = path[:q]
	}
	if hasSegment(path, "/v1/messages") {
		return Anthropic
	}
	if hasSegment(path, "/v1/responses") {
		return OpenAIResponses
	}
	return OpenAIChat
}

// hasSegment reports whether seg occurs in path followed by the end of the
// path or a '/'.
func hasSegment(path []byte, seg string) bool {
	for off := 0; off < len(path); {
		i := bytes.Index(path[off:], []byte(seg))
		if i < 0 {
			return false
		}
		end := off + i + len(seg)
		if end == len(path) || path[end] == '/' {
			return true
		}
		off += i + 1
	}
	return false
}
