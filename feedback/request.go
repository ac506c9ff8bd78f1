package feedback

import (
	"sync/atomic"
)

// Request holds the facts about a request body that admission and
// telemetry need. Zero values mean "absent".
type Request struct {
	// Model is the top-level "model" string, decoded. Models up to 128
	// bytes are interned through a small bounded table, so a repeated
	// model does not allocate. "" if absent or not a string.
	Model string
	// Stream is true when the top-level "stream" is the literal true.
	Stream bool
	// MaxTokens is the largest of the top-level max_tokens,
	// max_completion_tokens and max_output_tokens integers (the integer
	// part of a number; negative values read as 0); 0 if none is present.
	MaxTokens int
	// IncludeUsage is stream_options.include_usage == true.
	IncludeUsage bool
	// PromptTokens estimates prompt size as ceil(bytes/4), where bytes is
	// the total size of the raw JSON values of the top-level
	// prompt-bearing members: messages, input, system, prompt,
	// instructions and tools. A body that is not a JSON object is
	// estimated whole (len(body)/4, rounded up); a truncated member
	// counts to the end of the body.
	PromptTokens int
}

// InspectRequest reads Request facts from a JSON request body, looking at
// top-level members only (a "model" inside messages is never taken) and
// skipping the rest without decoding it. When a member is repeated, the
// last occurrence wins, as with encoding/json. It never panics, and
// allocates only to intern a model name not seen recently (or longer than
// 128 bytes, or escaped beyond 128 bytes decoded).
func InspectRequest(body []byte) Request {
	var r Request
	c, ok := openObject(body, 0)
	if !ok {
		r.PromptTokens = ceilDiv4(len(body))
		return r
	}
	var maxTok, maxCompl, maxOut, promptBytes int
	for c.next(nil) {
		switch string(c.key()) {
		case "model":
			r.Model = ""
			if s, ok := c.str(); ok {
				r.Model = internJSON(s)
			}
		case "stream":
			r.Stream = c.lit("true")
		case "max_tokens":
			maxTok = readCount(&c)
		case "max_completion_tokens":
			maxCompl = readCount(&c)
		case "max_output_tokens":
			maxOut = readCount(&c)
		case "stream_options":
			r.IncludeUsage = readIncludeUsage(&c)
		case "messages", "input", "system", "prompt", "instructions", "tools":
			start := c.i
			if _, ok := c.raw(); !ok {
				promptBytes += len(body) - start
				break
			}
			promptBytes += c.i - start
		}
	}
	r.MaxTokens = max(maxTok, maxCompl, maxOut)
	r.PromptTokens = ceilDiv4(promptBytes)
	return r
}

func ceilDiv4(n int) int { return (n + 3) / 4 }

// readCount reads a non-negative count; 0 if the value is not a number.
func readCount(c *cursor) int {
	n, ok := c.int()
	if !ok {
		return 0
	}
	return max(n, 0)
}

func readIncludeUsage(c *cursor) bool {
	inc := false
	o := c.members()
	for o.next(c) {
		if string(o.key()) == "include_usage" {
			inc = o.lit("true")
		}
	}
	return inc
}

// Model interning: a direct-mapped, lock-free table. A hit costs a hash and
// a compare; a miss allocates the string (and its slot pointer) and
// replaces whatever shared the slot. The table is bounded (internSlots
// entries of at most internMax bytes), so adversarial model names cannot
// grow it.
const (
	internSlots = 256
	internMax   = 128
)

var internTab [internSlots]atomic.Pointer[string]

// internJSON decodes a raw JSON string and interns it.
func internJSON(raw []byte) string {
	var buf [internMax]byte
	s, ok := decodeStr(raw, buf[:])
	if !ok {
		// Escaped and longer than internMax decoded, or invalid escapes:
		// decode into a fresh buffer (raw is an upper bound).
		big := make([]byte, len(raw))
		if n, ok := unescapeInto(big, raw); ok {
			return string(big[:n])
		}
		return string(raw)
	}
	return intern(s)
}

// intern returns s as a string, from the table when present.
func intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > internMax {
		return string(b)
	}
	h := uint32(2166136261) // FNV-1a
	for _, c := range b {
		h ^= uint32(c)
		h *= 16777619
	}
	slot := &internTab[h%internSlots]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}
