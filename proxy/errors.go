package proxy

import (
	"errors"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/adaptive"
	"github.com/sluicehq/sluice/feedback"
)

// errKind is every error Sluice itself answers with. Each maps to exactly one
// status code, one reason (the X-Sluice-Error / X-Sluice-Rejected header
// value) and one provider error type, here and nowhere else.
type errKind uint8

const (
	errNoRoute errKind = iota
	errQueueFull
	errQueueTimeout
	errUnreachable     // connect failed, or the upstream closed before answering
	errFirstToken      // no response (headers) within timeouts.first_token
	errUpstreamTimeout // a non-streaming body did not complete within timeouts.total
	errBadUpstreamBody // upstream body unreadable (e.g. too large) before anything was sent
	errShuttingDown
	numErrKinds
)

type errSpec struct {
	status    int
	reason    string // header value and metric label
	openai    string // OpenAI error.type
	anthropic string // Anthropic error.type
	message   string // %s is the provider name
}

var errSpecs = [numErrKinds]errSpec{
	errNoRoute:         {fasthttp.StatusNotFound, "no_route", "invalid_request_error", "not_found_error", "Sluice: no provider is configured for this host and path"},
	errQueueFull:       {fasthttp.StatusTooManyRequests, "queue_full", "rate_limit_error", "rate_limit_error", "Sluice: too many requests are waiting for provider %s; retry after the delay in Retry-After"},
	errQueueTimeout:    {fasthttp.StatusTooManyRequests, "queue_timeout", "rate_limit_error", "rate_limit_error", "Sluice: no capacity became free for provider %s within the queue's max_wait; retry after the delay in Retry-After"},
	errUnreachable:     {fasthttp.StatusBadGateway, "upstream_unreachable", "server_error", "api_error", "Sluice: provider %s could not be reached or closed the connection before answering"},
	errFirstToken:      {fasthttp.StatusGatewayTimeout, "first_token_timeout", "timeout_error", "timeout_error", "Sluice: provider %s did not answer within the first-token timeout"},
	errUpstreamTimeout: {fasthttp.StatusGatewayTimeout, "upstream_timeout", "timeout_error", "timeout_error", "Sluice: provider %s did not finish its response within the total timeout"},
	errBadUpstreamBody: {fasthttp.StatusBadGateway, "upstream_bad_response", "server_error", "api_error", "Sluice: provider %s sent a response Sluice could not relay"},
	errShuttingDown:    {fasthttp.StatusServiceUnavailable, "shutting_down", "server_error", "overloaded_error", "Sluice: the proxy is shutting down; retry on another instance"},
}

// errorBodies holds the JSON error bodies of one provider, built when the
// config is applied so the request path only copies bytes.
type errorBodies [2][numErrKinds][]byte // [0] OpenAI shape, [1] Anthropic shape

func buildErrorBodies(provider string) *errorBodies {
	var b errorBodies
	for k := errKind(0); k < numErrKinds; k++ {
		sp := errSpecs[k]
		msg := sp.message
		if provider != "" {
			msg = replaceVerb(msg, provider)
		} else {
			msg = replaceVerb(msg, "(none)")
		}
		b[0][k] = openAIError(msg, sp.openai, sp.reason)
		b[1][k] = anthropicError(msg, sp.anthropic)
	}
	return &b
}

func replaceVerb(msg, name string) string {
	for i := 0; i+1 < len(msg); i++ {
		if msg[i] == '%' && msg[i+1] == 's' {
			return msg[:i] + name + msg[i+2:]
		}
	}
	return msg
}

func openAIError(msg, typ, code string) []byte {
	b := []byte(`{"error":{"message":`)
	b = strconv.AppendQuote(b, msg)
	b = append(b, `,"type":`...)
	b = strconv.AppendQuote(b, typ)
	b = append(b, `,"param":null,"code":`...)
	b = strconv.AppendQuote(b, code)
	return append(b, `}}`...)
}

func anthropicError(msg, typ string) []byte {
	b := []byte(`{"type":"error","error":{"type":`)
	b = strconv.AppendQuote(b, typ)
	b = append(b, `,"message":`...)
	b = strconv.AppendQuote(b, msg)
	return append(b, `}}`...)
}

// Header names Sluice sets on answers it produces itself.
const (
	// HeaderRejected is set on 429s that Sluice (not the upstream) produced:
	// queue_full or queue_timeout.
	HeaderRejected = "X-Sluice-Rejected"
	// HeaderError is set on other errors Sluice produced: no_route,
	// upstream_unreachable, first_token_timeout, upstream_bad_response,
	// upstream_timeout, shutting_down.
	HeaderError = "X-Sluice-Error"
)

// writeError answers ctx with Sluice's own error in the dialect's shape.
// retryAfter is in whole seconds (0 = no header).
func writeError(ctx *fasthttp.RequestCtx, bodies *errorBodies, anthropic bool, k errKind, retryAfter int) {
	sp := &errSpecs[k]
	ctx.Response.Reset()
	ctx.SetStatusCode(sp.status)
	ctx.SetContentType("application/json")
	if k == errQueueFull || k == errQueueTimeout {
		ctx.Response.Header.Set(HeaderRejected, sp.reason)
	} else {
		ctx.Response.Header.Set(HeaderError, sp.reason)
	}
	if retryAfter > 0 {
		var buf [20]byte
		ctx.Response.Header.SetBytesV("Retry-After", strconv.AppendInt(buf[:0], int64(retryAfter), 10))
	}
	i := 0
	if anthropic {
		i = 1
	}
	ctx.SetBody(bodies[i][k])
}

// errClientGone marks a request whose client went away; nothing is sent.
var errClientGone = errors.New("client disconnected")

// errShutdownCut marks a stream cut because the shutdown grace period ended.
var errShutdownCut = errors.New("stream cut at shutdown")

// classifyDoErr maps an error from the upstream round trip (before any
// response header arrived) to what Sluice answers and what the controller
// hears. It is the one place where transport failures become status codes.
func classifyDoErr(err error) (errKind, feedback.ErrorClass) {
	switch {
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded),
		errors.Is(err, fasthttp.ErrDialTimeout):
		if errors.Is(err, fasthttp.ErrDialTimeout) {
			return errUnreachable, feedback.ErrOther
		}
		return errFirstToken, feedback.ErrTimeout
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return errBadUpstreamBody, feedback.ErrOther
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return errFirstToken, feedback.ErrTimeout
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return errUnreachable, feedback.ErrOther
	}
	return errUnreachable, feedback.ErrOther
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
