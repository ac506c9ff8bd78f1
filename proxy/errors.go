package proxy

import (
	"errors"
	"net"
	"os"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
)

// errClientGone marks a request whose client went away; nothing is sent.
var errClientGone = errors.New("client disconnected")

// errShutdownCut marks a stream cut because the shutdown grace period ended.
var errShutdownCut = errors.New("stream cut at shutdown")

// Errors that end a stream early. The client sees a truncated body (no
// terminating chunk), which SDKs report as an incomplete response.
var (
	errFirstTokenTimeout = errors.New("upstream sent no first token within timeouts.first_token")
	errIdleTimeout       = errors.New("upstream was silent longer than timeouts.idle")
	errTotalTimeout      = errors.New("stream exceeded timeouts.total")
	errUpstreamBroke     = errors.New("upstream connection broke mid-stream")
)

// classifyDoErr maps an error from the upstream round trip (before any
// response header arrived) of a request that streams or not to the
// outcome Sluice answers with, how the attempt failed and the error class
// it carries. What the failure means to the controller, the breaker and
// the retry policy is adaptive's answer table (adaptive.MeaningOf). It is
// the one place where transport failures become outcomes. A timeout of a
// non-streaming request is its total deadline (see admit): a long answer,
// not evidence of congestion.
func classifyDoErr(err error, stream bool) (outcome, adaptive.AttemptFailure, feedback.ErrorClass) {
	switch {
	case errors.Is(err, errConnect), errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, fasthttp.ErrNoFreeConns):
		return outUpstreamUnreachable, adaptive.AttemptConnect, feedback.ErrOther
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded):
		return timedOut(stream)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return outBadUpstreamBody, adaptive.AttemptReset, feedback.ErrOther
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return timedOut(stream)
	}
	return outUpstreamUnreachable, adaptive.AttemptReset, feedback.ErrOther
}

// timedOut is classifyDoErr's answer for a deadline that passed before the
// response headers.
func timedOut(stream bool) (outcome, adaptive.AttemptFailure, feedback.ErrorClass) {
	if !stream {
		return outUpstreamTimeout, adaptive.AttemptReset, feedback.ErrOther
	}
	return outFirstTokenTimeout, adaptive.AttemptTimeout, feedback.ErrTimeout
}

// answerOutcome is what the controller hears about the current attempt's
// answer (st.status, error class class, the provider's Retry-After ra):
// the answer table's, except for a 429 rate-limit answer to a request
// Sluice sent within a request rate it was told (rate.rpm): the
// provider's rate, not its capacity, refused it, and the rate layer is
// the answer to that (a retry after the Retry-After, the bucket's
// pacing). Cutting the concurrency limit on it would only lower the
// throughput the rate allows (BENCHMARKS.md, the rate-limit scenario).
func (st *stream) answerOutcome(class feedback.ErrorClass, ra time.Duration) adaptive.Outcome {
	if st.status == 429 && st.pacedRefusal(class) {
		return adaptive.Outcome{}
	}
	return adaptive.MeaningOf(adaptive.AttemptResult{Status: st.status, Class: class, RateLimitHeaders: st.adm.rlHeaders}).Heard(ra)
}

// pacedRefusal reports whether a provider error of class class is a
// rate-limit refusal of a request Sluice sent within a request rate it was
// told (rate.rpm): the rate layer's signal, not congestion, whether it
// comes as a 429 answer or as an error event in the middle of a stream.
func (st *stream) pacedRefusal(class feedback.ErrorClass) bool {
	return class == feedback.ErrRateLimit && st.adm.reserved && st.prov.adm.Rates.PacesRequests()
}
