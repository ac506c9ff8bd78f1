package feedback

import "bytes"

// Dialect is the wire format of a provider API: which paths select it,
// which streaming events bear output tokens and where usage is reported,
// how Sluice's own error answers look, which rate-limit headers the
// provider sends. Each is described by a DialectSpec registered by the
// file named for it (dialect_<name>.go); a Dialect is its index in the
// registry. The zero value is not a valid dialect; a Meter given the zero
// Dialect treats the stream as OpenAIChat, and its String is "unknown".
type Dialect uint8

// DialectSpec describes a dialect. Adding one is a new file that
// registers its spec (registerDialect) with its tests; nothing else in
// Sluice switches over dialects.
type DialectSpec struct {
	// Name is a stable lower-case name usable as a metric label.
	Name string
	// Family is the value of a provider's dialect: setting that selects
	// this dialect ("openai", "anthropic"); a family may hold several.
	Family string
	// Default: the dialect of its family for a path that no dialect's
	// Paths match; the default of the "openai" family is also that of
	// dialect: auto.
	Default bool
	// Paths are path segments that select the dialect: a request path
	// containing one, followed by the end of the path or a '/', is in
	// this dialect (dialects are tried in registration order).
	Paths []string
	// Meter meters one server-sent event of a stream in this dialect
	// (see Meter); non-streaming bodies are read alike for every dialect
	// (MeterJSON).
	Meter func(m *Meter, typ, data []byte, truncated bool)
	// ErrorTypes names each ErrorType of Sluice's own answers in the
	// dialect's words.
	ErrorTypes [NumErrorTypes]string
	// ErrorBody renders Sluice's own error answer: its message, its
	// error type (from ErrorTypes) and Sluice's reason code.
	ErrorBody func(msg, typ, code string) []byte
	// RateLimitPrefix is the prefix of the provider's rate-limit
	// headers (read by RateLimits.Header).
	RateLimitPrefix string
	// AuthHeader is how the provider takes an API key ("bearer":
	// Authorization: Bearer, "x-api-key"), the default of a provider's
	// auth: setting.
	AuthHeader string
}

// ErrorType is the kind of an error Sluice answers with itself; each
// dialect names it in its own words (DialectSpec.ErrorTypes).
type ErrorType uint8

const (
	ErrTypeInvalidRequest ErrorType = iota // a request Sluice does not forward
	ErrTypeNotFound                        // no route
	ErrTypeTooLarge                        // a request body over the limit
	ErrTypeRateLimit                       // a rate limit or share refused it
	ErrTypeOverloaded                      // no capacity now (queue, shutdown, budget)
	ErrTypeServer                          // the upstream failed
	ErrTypeTimeout                         // the upstream took too long
	ErrTypeAuthentication                  // an unknown client, refused (401)
	ErrTypePermission                      // a client not allowed where it asked (403)
	// NumErrorTypes bounds ErrorType values.
	NumErrorTypes
)

// dialects is the registry; index 0 is the invalid zero Dialect.
var dialects = []*DialectSpec{nil}

// registerDialect adds s to the registry and returns its Dialect. It is
// called from package-level variable declarations, once per dialect.
func registerDialect(s *DialectSpec) Dialect {
	dialects = append(dialects, s)
	return Dialect(len(dialects) - 1)
}

// Dialects returns every registered dialect, in registration order.
func Dialects() []Dialect {
	ds := make([]Dialect, 0, len(dialects)-1)
	for d := 1; d < len(dialects); d++ {
		ds = append(ds, Dialect(d))
	}
	return ds
}

// Spec returns the description of d; the zero or an unknown Dialect gets
// OpenAIChat's.
func (d Dialect) Spec() *DialectSpec {
	if d == 0 || int(d) >= len(dialects) {
		return dialects[OpenAIChat]
	}
	return dialects[d]
}

// String returns the dialect's Name ("openai_chat", "openai_responses",
// "anthropic", ...), or "unknown".
func (d Dialect) String() string {
	if d == 0 || int(d) >= len(dialects) {
		return "unknown"
	}
	return dialects[d].Name
}

// DetectDialect picks the dialect of a request from its provider's
// dialect: setting (family; "" or "auto": any) and its path (after the
// route prefix). The first dialect of the family whose Paths match the
// path is chosen, else the family's Default (for auto, the default of
// "openai"). A query string is not searched. It does not allocate.
func DetectDialect(family string, path []byte) Dialect {
	auto := family == "" || family == "auto"
	if auto {
		family = "openai"
	}
	if q := bytes.IndexByte(path, '?'); q >= 0 {
		path = path[:q]
	}
	def := OpenAIChat
	for d := 1; d < len(dialects); d++ {
		s := dialects[d]
		if !auto && s.Family != family {
			continue
		}
		for _, p := range s.Paths {
			if hasSegment(path, p) {
				return Dialect(d)
			}
		}
		if s.Default && s.Family == family {
			def = Dialect(d)
		}
	}
	return def
}

// DialectForPath picks the dialect from a request path alone, as for
// dialect: auto: a path containing the segment "/v1/messages" is
// Anthropic, one containing "/v1/responses" is OpenAIResponses (the match
// must end at the end of the path, a '/' or a '?'); anything else,
// including an empty path, is OpenAIChat. It is tolerant of route
// prefixes and does not allocate.
func DialectForPath(path []byte) Dialect { return DetectDialect("auto", path) }

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

// IsRateLimitHeader reports whether name starts like a rate-limit header
// of a registered dialect (x-ratelimit-*, anthropic-ratelimit-*), in any
// ASCII case. It does not allocate.
func IsRateLimitHeader(name []byte) bool {
	for d := 1; d < len(dialects); d++ {
		if p := dialects[d].RateLimitPrefix; p != "" && len(name) > len(p) && hasPrefixFold(name, p) {
			return true
		}
	}
	return false
}
