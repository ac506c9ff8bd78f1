// Package feedback turns the bytes of LLM provider traffic into signals for
// the congestion controller: request facts (model, stream, max tokens, a
// prompt-size estimate), the class of an upstream error, Retry-After
// hints, rate-limit headers, and, for a response,
// time to first token, output tokens, token rate, finish reason and
// mid-stream errors. What an error class means to the controller, the
// breaker and the retry policy is decided in adaptive (its answer table),
// not here.
//
// The package is pure: it imports only the standard library, never reads a
// clock (every time is passed in by the caller) and keeps no state other
// than a small, bounded, concurrency-safe intern table for model names.
//
// Three wire dialects are understood (see Dialect): OpenAI Chat Completions
// (and OpenAI-compatible servers), the OpenAI Responses API and Anthropic
// Messages. Server-sent events are framed per the WHATWG specification and
// JSON payloads are read with a small hand-written scanner (json.go) that
// looks only at the few keys it needs, never panics on malformed input, and
// does not allocate.
package feedback
