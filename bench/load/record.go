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

// Record is one attempt: one HTTP request as the client saw it. Without
// an SDK's retries ([Config.SDK]) every call is one attempt; with them a
// call is one or more attempts, each with its own Record, and one [Call].
// Durations are real time measured with the monotonic clock from the
// moment the request was handed to the HTTP client; zero means "did not
// happen" (no first token, say).
type Record struct {
	// Start is when the request started, since the start of the run.
	Start time.Duration
	// Client is the closed-loop client index, or the open-loop arrival index.
	Client int
	// Retry is the attempt's x-stainless-retry-count: 0 for a call's first
	// attempt, n for its n-th retry.
	Retry int
	// Tenant is the index of the API key sent (Config.Tenants); 0 without
	// tenants.
	Tenant int
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
	// RetryAfter is what a refusal (Sluice's or the provider's) asked the
	// client to wait, as the SDKs read it: retry-after-ms, else
	// Retry-After in seconds or as a date; 0 when it names no wait.
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

// Call is one logical request: one call of the calling code, which an SDK
// may send several times ([Config.SDK]). It starts when its first attempt
// starts and ends when its last attempt ends, its backoffs included.
type Call struct {
	// Start is when the first attempt started, since the start of the run.
	Start time.Duration
	// Client is the closed-loop client index, or the open-loop arrival
	// index.
	Client int
	// Tenant is the index of the API key sent; 0 without tenants.
	Tenant int
	// Outcome is the last attempt's, or Cut when the run ended during an
	// attempt or a backoff.
	Outcome Outcome
	// Status and Reason are the last attempt's.
	Status int
	Reason string
	// Stop says why there was no further attempt: StopOK, StopNoRetries,
	// StopExhausted, StopNotRetryable, StopShouldRetry, StopLongDelay,
	// StopStreamBroken or StopCut.
	Stop string
	// Attempts is how many requests the call sent.
	Attempts int
	// Backoff is the time spent waiting between attempts.
	Backoff time.Duration
	// Total is the time from the first attempt's start to the end of the
	// last attempt (or to the cut).
	Total time.Duration
	// TTFT is the time from the call's start to the first token of the
	// attempt that succeeded (OK streams only): what the calling code
	// waited, retries and backoffs included.
	TTFT time.Duration
	// Tokens is the output tokens of the attempt that succeeded.
	Tokens int
}
