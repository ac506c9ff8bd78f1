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
// response header arrived) to the outcome Sluice answers with and what the
// controller hears. It is the one place where transport failures become
// outcomes.
func classifyDoErr(err error) (outcome, feedback.ErrorClass) {
	switch {
	case errors.Is(err, errConnect), errors.Is(err, fasthttp.ErrDialTimeout):
		return outUpstreamUnreachable, feedback.ErrOther
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded):
		return outFirstTokenTimeout, feedback.ErrTimeout
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return outBadUpstreamBody, feedback.ErrOther
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return outFirstTokenTimeout, feedback.ErrTimeout
	}
	return outUpstreamUnreachable, feedback.ErrOther
}

// controllerOutcome is what the provider's controller hears about a
// response with status (0: none arrived) and error class: the feedback
// package's verdict, with the drop's kind and the provider's Retry-After.
func controllerOutcome(status int, class feedback.ErrorClass, retryAfter time.Duration) adaptive.Outcome {
	switch feedback.Judge(status, class) {
	case feedback.Success:
		return adaptive.Outcome{Kind: adaptive.OutcomeSuccess}
	case feedback.Drop:
		return adaptive.Outcome{Kind: adaptive.OutcomeDrop, Drop: dropKind(status, class), RetryAfter: retryAfter}
	}
	return adaptive.Outcome{}
}

// answerOutcome is what the controller hears about the current attempt's
// answer (st.status, error class class, the provider's Retry-After ra):
// controllerOutcome's verdict, except for a 429 rate-limit answer to a
// request Sluice sent within a request rate it was told (rate.rpm): the
// provider's rate, not its capacity, refused it, and the rate layer is
// the answer to that (a retry after the Retry-After, the bucket's
// pacing). Cutting the concurrency limit on it would only lower the
// throughput the rate allows (the rate-limit scenario, gradient2 with the
// provider's rate configured: 91-98% of the oracle with such cuts, 94-107%
// without; BENCHMARKS.md).
func (st *stream) answerOutcome(class feedback.ErrorClass, ra time.Duration) adaptive.Outcome {
	if st.status == 429 && st.pacedRefusal(class) {
		return adaptive.Outcome{}
	}
	return controllerOutcome(st.status, class, ra)
}

// pacedRefusal reports whether a provider error of class class is a
// rate-limit refusal of a request Sluice sent within a request rate it was
// told (rate.rpm): the rate layer's signal, not congestion, whether it
// comes as a 429 answer or as an error event in the middle of a stream.
func (st *stream) pacedRefusal(class feedback.ErrorClass) bool {
	return class == feedback.ErrRateLimit && st.adm.reserved && st.prov.adm.Rates.PacesRequests()
}

// dropKind maps a classified upstream failure to the controller's drop kind.
func dropKind(status int, class feedback.ErrorClass) adaptive.DropKind {
	switch {
	case class == feedback.ErrTimeout:
		return adaptive.DropTimeout
	case status == 429 || class == feedback.ErrRateLimit:
		return adaptive.DropRateLimit
	case status == 529 || class == feedback.ErrOverloaded:
		return adaptive.DropOverloaded
	default:
		return adaptive.DropUnavailable
	}
}
