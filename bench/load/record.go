package load

import "time"

// Outcome is how one request ended, from the client's point of view.
type Outcome uint8

const (
	// OK: status 200 and, for a stream, the whole stream (clean end of the
	// chunked body and the dialect's terminal event).
	OK Outcome = iota + 1
	// RejectedSluice: a refusal Sluice produced (X-Sluice-Rejected set: 429
	// over_share, or 503 queue_full, queue_timeout, queue_deadline,
	// displaced).
	RejectedSluice
	// RejectedUpstream: a 429, 529 or 503 from the provider (no Sluice
	// header): the provider refused the request.
	RejectedUpstream
	// Failed: any other error: another status (Sluice's own 502/504 carry
	// X-Sluice-Error in Reason), a transport error, or a stream that broke
	// off before its end.
	Failed
	// Cut: still running when the run ended; the generator closed it.
	// Cut requests are left out of every summary except Summary.Cut.
	Cut
)

// String returns a short name for o.
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case RejectedSluice:
		return "rejected_sluice"
	case RejectedUpstream:
		return "rejected_upstream"
	case Failed:
		return "failed"
	case Cut:
		return "cut"
	}
	return "unknown"
}

// Record is one request as the client saw it. Durations are real time
// measured with the monotonic clock from the moment the request was handed
// to the HTTP client; zero means "did not happen" (no first token, say).
type Record struct {
	// Start is when the request started, since the start of the run.
	Start time.Duration
	// Client is the closed-loop client index, or the open-loop arrival index.
	Client int
	// Outcome is how the request ended.
	Outcome Outcome
	// Status is the HTTP status; 0 when no response arrived.
	Status int
	// Reason is the value of X-Sluice-Rejected or X-Sluice-Error when
	// Sluice answered, the transport error for a failed request, or "".
	Reason string
	// TTFB is the time until the response headers arrived.
	TTFB time.Duration
	// TTFT is the time until the first output token (streams only).
	TTFT time.Duration
	// Total is the time until the response ended.
	Total time.Duration
	// Tokens is the number of output tokens received: content deltas of a
	// stream; for a non-stream response, its usage (completion_tokens or
	// output_tokens), else the drawn output size.
	Tokens int
	// LastToken is the time until the last output token (streams only).
	LastToken time.Duration
	// MaxGap is the longest gap between two output tokens of a stream.
	MaxGap time.Duration
	// PromptTokens and OutputTokens are the sizes the generator asked for.
	PromptTokens, OutputTokens int
	// RetryAfter is what a refusal by Sluice asked the client to wait
	// (retry-after-ms, else Retry-After); 0 otherwise.
	RetryAfter time.Duration
}

// End returns when the request ended, since the start of the run.
func (r *Record) End() time.Duration { return r.Start + r.Total }

// ITL returns the mean inter-token latency of a stream: (LastToken - TTFT)
// over the gaps between its tokens; 0 with fewer than two tokens.
func (r *Record) ITL() time.Duration {
	if r.Tokens < 2 || r.TTFT <= 0 {
		return 0
	}
	return (r.LastToken - r.TTFT) / time.Duration(r.Tokens-1)
}
