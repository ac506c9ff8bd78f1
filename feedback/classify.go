package feedback

// ErrorClass is what an upstream error means, independent of provider.
type ErrorClass uint8

const (
	ErrNone              ErrorClass = iota
	ErrRateLimit                    // 429 rate_limit_exceeded / rate_limit_error
	ErrOverloaded                   // 529 overloaded_error, 503 "overloaded"/"slow down", mid-stream overloaded_error
	ErrInsufficientQuota            // 429 insufficient_quota (billing, not congestion)
	ErrInvalidRequest               // 400, 413, 422
	ErrAuth                         // 401, 403
	ErrNotFound                     // 404
	ErrServer                       // 500, 502, other 5xx
	ErrUnavailable                  // 503 without overload wording
	ErrTimeout                      // first-token timeout: set by the proxy, never parsed
	ErrOther                        // anything else that is an error
	// NumErrorClasses bounds ErrorClass values, for tables indexed by
	// class.
	NumErrorClasses
)

// String returns a stable metric label; "" for ErrNone.
func (c ErrorClass) String() string {
	switch c {
	case ErrNone:
		return ""
	case ErrRateLimit:
		return "rate_limit"
	case ErrOverloaded:
		return "overloaded"
	case ErrInsufficientQuota:
		return "insufficient_quota"
	case ErrInvalidRequest:
		return "invalid_request"
	case ErrAuth:
		return "auth"
	case ErrNotFound:
		return "not_found"
	case ErrServer:
		return "server"
	case ErrUnavailable:
		return "unavailable"
	case ErrTimeout:
		return "timeout"
	}
	return "other"
}

// maxWordScan bounds how much of a non-JSON body is searched for overload
// wording.
const maxWordScan = 4 << 10

// ClassifyError maps an upstream status and its body to a class. The body
// may be empty, non-JSON, the OpenAI shape {"error":{"message","type",
// "code"}}, the Anthropic shape {"type":"error","error":{"type","message"}},
// or a flat {"object":"error","type","code","message"} (vLLM).
//
// The status decides where it is unambiguous: 529 is ErrOverloaded; 400,
// 413 and 422 ErrInvalidRequest; 401 and 403 ErrAuth; 404 ErrNotFound. A
// 429 is ErrRateLimit unless the body names insufficient_quota (or an
// overload). A 503 is ErrOverloaded when the body names an overload or its
// message (or a non-JSON body) says "overloaded" or "slow down", else
// ErrUnavailable. Other 5xx are ErrServer, or ErrOverloaded when the body's
// type or code is an overload. Other 4xx use the body's type or code when
// known, else ErrOther. A 2xx or status 0 is ErrNone unless the body is an
// error object, which is then classified by its type, code and message.
// Any other status is ErrOther. It does not allocate.
func ClassifyError(status int, body []byte) ErrorClass {
	var e errInfo
	c, _ := openObject(body, 0)
	for c.next(nil) {
		e.observe(&c)
	}
	named := e.named()
	switch {
	case status == 0 || (status >= 200 && status < 300):
		if !e.found {
			return ErrNone
		}
		return e.streamClass()
	case status == 429:
		if named == ErrInsufficientQuota || named == ErrOverloaded {
			return named
		}
		return ErrRateLimit
	case status == 529:
		return ErrOverloaded
	case status == 503:
		if named == ErrOverloaded || overloadWords(e.message()) {
			return ErrOverloaded
		}
		if !e.found && overloadWords(body[:min(len(body), maxWordScan)]) {
			return ErrOverloaded
		}
		return ErrUnavailable
	case status == 400 || status == 413 || status == 422:
		return ErrInvalidRequest
	case status == 401 || status == 403:
		return ErrAuth
	case status == 404:
		return ErrNotFound
	case status >= 500 && status < 600:
		if named == ErrOverloaded {
			return ErrOverloaded
		}
		return ErrServer
	case status >= 400 && status < 500:
		if named != ErrNone {
			return named
		}
	}
	return ErrOther
}

// errInfo collects the error fields of a JSON object, at the top level and
// inside an "error" member.
type errInfo struct {
	found                   bool // the object is an error
	nested                  bool // an "error" member (object or string) was seen
	typ, code, msg          []byte
	topType, topCode, topMs []byte
}

// observe looks at the member of an object the cursor is at. It consumes
// the value of the members it knows (error, type, object, code, message).
func (e *errInfo) observe(c *cursor) {
	switch string(c.key()) {
	case "error":
		if sub, ok := c.object(); ok {
			e.found, e.nested = true, true
			for sub.next(c) {
				switch string(sub.key()) {
				case "type":
					e.typ, _ = sub.str()
				case "code":
					e.code, _ = sub.str()
				case "message":
					e.msg, _ = sub.str()
				}
			}
		} else if s, ok := c.str(); ok {
			e.found, e.nested = true, true
			e.msg = s
		}
	case "type":
		if s, ok := c.str(); ok {
			e.topType = s
			if string(s) == "error" {
				e.found = true
			}
		}
	case "object":
		if s, ok := c.str(); ok && string(s) == "error" {
			e.found = true
		}
	case "code":
		e.topCode, _ = c.str()
	case "message":
		e.topMs, _ = c.str()
	}
}

// fields returns the type, code and message to classify by: those of the
// "error" member when there is one, else the top-level ones.
func (e *errInfo) fields() (typ, code, msg []byte) {
	if e.nested {
		return e.typ, e.code, e.msg
	}
	typ = e.topType
	if string(typ) == "error" {
		typ = nil
	}
	return typ, e.topCode, e.topMs
}

func (e *errInfo) message() []byte {
	_, _, msg := e.fields()
	return msg
}

// named returns the class named by the code, else the type; ErrNone if
// neither is a known name.
func (e *errInfo) named() ErrorClass {
	if !e.found {
		return ErrNone
	}
	typ, code, _ := e.fields()
	if c := className(code); c != ErrNone {
		return c
	}
	return className(typ)
}

// streamClass classifies an error seen without a useful HTTP status (in a
// stream, or in a 2xx body): by name (code, then type), except that
// overload wording in the message turns an unknown, server or unavailable
// error into ErrOverloaded; an unnamed error is ErrOther.
func (e *errInfo) streamClass() ErrorClass {
	c := e.named()
	switch c {
	case ErrNone, ErrServer, ErrUnavailable:
		// Overload wording is more specific than a generic server error.
		if overloadWords(e.message()) {
			return ErrOverloaded
		}
	}
	if c == ErrNone {
		return ErrOther
	}
	return c
}

// streamErrorClass classifies the data of an error event.
func streamErrorClass(data []byte, truncated bool) ErrorClass {
	if truncated {
		return ErrOther
	}
	var e errInfo
	c, ok := openObject(data, 0)
	if !ok {
		return classifyMessage(data)
	}
	for c.next(nil) {
		e.observe(&c)
	}
	e.found = true
	return e.streamClass()
}

// classifyMessage classifies free text from an error event.
func classifyMessage(b []byte) ErrorClass {
	if overloadWords(b[:min(len(b), maxWordScan)]) {
		return ErrOverloaded
	}
	return ErrOther
}

// className maps a provider error type or code to a class; ErrNone if
// unknown. Escaped names are decoded first.
func className(raw []byte) ErrorClass {
	if len(raw) == 0 {
		return ErrNone
	}
	var buf [48]byte
	s, _ := decodeStr(raw, buf[:])
	switch string(s) {
	case "rate_limit_exceeded", "rate_limit_error", "rate_limit", "rate_limited",
		"too_many_requests", "requests", "tokens":
		return ErrRateLimit
	case "overloaded_error", "overloaded", "server_overloaded", "engine_overloaded", "slow_down":
		return ErrOverloaded
	case "insufficient_quota", "billing_hard_limit_reached":
		return ErrInsufficientQuota
	case "invalid_request_error", "invalid_request", "request_too_large",
		"context_length_exceeded", "invalid_prompt", "BadRequestError":
		return ErrInvalidRequest
	case "authentication_error", "permission_error", "invalid_api_key",
		"permission_denied", "unauthorized", "forbidden":
		return ErrAuth
	case "not_found_error", "model_not_found", "not_found", "NotFoundError":
		return ErrNotFound
	case "api_error", "server_error", "internal_error", "internal_server_error",
		"InternalServerError":
		return ErrServer
	case "service_unavailable", "unavailable_error":
		return ErrUnavailable
	}
	return ErrNone
}

// overloadWords reports whether b says "overloaded" or "slow down" in any
// ASCII case.
func overloadWords(b []byte) bool {
	return containsFold(b, "overloaded") || containsFold(b, "slow down")
}

// containsFold reports whether b contains the lower-case ASCII word w,
// ignoring ASCII case. It does not allocate.
func containsFold(b []byte, w string) bool {
	if len(w) == 0 {
		return true
	}
	first := w[0]
	for i := 0; i+len(w) <= len(b); i++ {
		if b[i]|0x20 != first {
			continue
		}
		j := 1
		for j < len(w) && lowerASCII(b[i+j]) == w[j] {
			j++
		}
		if j == len(w) {
			return true
		}
	}
	return false
}

func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
