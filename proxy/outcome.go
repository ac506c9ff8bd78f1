package proxy

import (
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/feedback"
)

// outcome is every way a request can end. Each is one row of outcomes:
// the label it is counted and traced under, what Sluice answers when the
// response has not started, and the header and error body of that answer.
// Nothing else in the package decides these.
type outcome uint8

const (
	// Requests that never reached an upstream: sluice_rejected_requests_total
	// {reason}, except outNoRoute (sluice_unrouted_requests_total). All but
	// outNoUpstream never got a permit.
	outNoRoute             outcome = iota // no provider for this host and path
	outQueueFull                          // the provider is at its limit and its wait queue full
	outQueueTimeout                       // the provider is at its limit: no permit within the deadline
	outQueueDeadline                      // the provider is at its limit: the estimated wait exceeds the deadline
	outDisplaced                          // the provider is at its limit: pushed out of a full queue by a higher priority
	outOverShare                          // the provider has free permits, but the request's class or tenant is at its share
	outQueuedClientGone                   // the client left while queued
	outRejectedShutdown                   // shutting down before the request got a permit
	outMethodNotAllowed                   // a method provider APIs do not use (405)
	outOptions                            // OPTIONS, answered by Sluice (204)
	outBadPath                            // a path that means different things to different readers (400)
	outBodyTooLarge                       // a request body over server.max_request_body (413)
	outBufferBudget                       // a request body that does not fit server.max_buffered_bytes (503)
	outBadRequestBody                     // a request body that could not be read (400)
	outBodyTimeout                        // a request body that did not arrive within server.body_timeout (408)
	outHeadersTooLarge                    // request headers over the read buffer (431); answered before routing
	outRateLimitedProvider                // the provider's rate: limits have no room within max_wait (429)
	outRateLimitedClient                  // the client key's rate.per_client limits have no room within max_wait (429)
	outRateLimitedUpstream                // no upstream's quota (configured or reported by the provider) has room within max_wait (429)
	outOverQuota                          // the request needs more than a quota's whole capacity: it can never fit (429)
	outNoUpstream                         // every upstream's circuit breaker is open (503)
	outUnknownClient                      // a credential no clients: entry matches, and the default policy refuses (401)
	outProviderNotAllowed                 // the client's policy does not list this provider (403)

	// Requests that held a permit: sluice_requests_total{end}.
	outComplete            // the whole response was relayed
	outClientGone          // the client left (or stopped reading)
	outUpstreamUnreachable // connect failed or the upstream closed before answering
	outFirstTokenTimeout   // no headers, or no first token, within timeouts.first_token
	outUpstreamTimeout     // a non-streaming answer took longer than timeouts.total
	outBadUpstreamBody     // the upstream body was unreadable
	outIdleTimeout         // a stream was silent longer than timeouts.idle
	outTotalTimeout        // a stream ran past timeouts.total
	outUpstreamBroke       // the upstream connection broke mid-stream
	outShutdown            // cut by shutdown
	outClientSlow          // the client accepted no bytes for server.write_timeout
	outAborted             // the response ended for another reason before EOF
	numOutcomes
)

// retryAfter says where the Retry-After of an answer comes from.
type retryAfter uint8

const (
	raNone     retryAfter = iota
	raEstimate            // the queue's estimate of this flow's wait (adaptive.Refusal)
	raOne                 // one second (shutdown: retry on another instance)
	raComputed            // computed for the request (admission.retryAfter): when the rate buckets fit it, when a breaker lets a probe through
)

type outcomeSpec struct {
	// label is the metric label value (end or reason) and the
	// sluice.end_reason / sluice.rejected span attribute.
	label string
	// admitted: counted in sluice_requests_total, else in
	// sluice_rejected_requests_total.
	admitted bool
	// status is Sluice's answer when the response has not started; 0 when
	// nothing is sent (the client is gone, or the upstream's response was
	// relayed).
	status int
	// header is HeaderRejected (Sluice refused to send the request) or
	// HeaderError (Sluice could not complete it); its value is reason.
	header string
	reason string
	ra     retryAfter
	// final: sending the same request again cannot change the answer (a
	// client or route error, a request no quota can ever hold). The answer
	// carries "x-should-retry: false", which the OpenAI and Anthropic SDKs
	// obey: without it they retry every 429 (over_quota) and 408/409.
	final bool
	// errType is the error's kind, which each dialect names in its own
	// words (feedback.DialectSpec.ErrorTypes); message is the body's text
	// (%s: the provider name; %r: what to do, hintRetryAfter or, for an
	// answer sent without Retry-After, hintBackoff). No message: no body.
	errType feedback.ErrorType
	message string
}

// What a refusal's message tells the client to do, in its %r: wait for
// the Retry-After the answer carries, or, when it carries none (a queue
// refusal before any permit has ended, so there is no estimate yet), back
// off on its own.
const (
	hintRetryAfter = "retry after the delay in Retry-After"
	hintBackoff    = "retry after a backoff (no wait estimate yet)"
)

var outcomes = [numOutcomes]outcomeSpec{
	outNoRoute: {"no_route", false, fasthttp.StatusNotFound, HeaderError, "no_route", raNone, true,
		feedback.ErrTypeNotFound, "Sluice: no provider is configured for this host and path"},
	outQueueFull: {"queue_full", false, fasthttp.StatusServiceUnavailable, HeaderRejected, "queue_full", raEstimate, false,
		feedback.ErrTypeOverloaded, "Sluice: provider %s is at its limit and too many requests are waiting; %r"},
	outQueueTimeout: {"queue_timeout", false, fasthttp.StatusServiceUnavailable, HeaderRejected, "queue_timeout", raEstimate, false,
		feedback.ErrTypeOverloaded, "Sluice: provider %s is at its limit and no capacity became free within the request's deadline; %r"},
	outQueueDeadline: {"queue_deadline", false, fasthttp.StatusServiceUnavailable, HeaderRejected, "queue_deadline", raEstimate, false,
		feedback.ErrTypeOverloaded, "Sluice: provider %s is at its limit and the wait for capacity would exceed the request's deadline; %r"},
	outDisplaced: {"displaced", false, fasthttp.StatusServiceUnavailable, HeaderRejected, "displaced", raEstimate, false,
		feedback.ErrTypeOverloaded, "Sluice: provider %s is at its limit and this request gave its place in the full queue to one of a higher priority; %r"},
	outOverShare: {"over_share", false, fasthttp.StatusTooManyRequests, HeaderRejected, "over_share", raEstimate, false,
		feedback.ErrTypeRateLimit, "Sluice: provider %s has capacity, but this request's class or tenant is using its whole share; %r"},
	outQueuedClientGone: {label: "client_gone"},
	outRejectedShutdown: {"shutting_down", false, fasthttp.StatusServiceUnavailable, HeaderError, "shutting_down", raOne, false,
		feedback.ErrTypeOverloaded, "Sluice: the proxy is shutting down; retry on another instance"},
	outMethodNotAllowed: {"method_not_allowed", false, fasthttp.StatusMethodNotAllowed, HeaderError, "method_not_allowed", raNone, true,
		feedback.ErrTypeInvalidRequest, "Sluice: this method is not forwarded to provider %s; allowed: " + allowedMethods},
	outOptions: {label: "options", status: fasthttp.StatusNoContent},
	outBadPath: {"bad_path", false, fasthttp.StatusBadRequest, HeaderError, "bad_path", raNone, true,
		feedback.ErrTypeInvalidRequest,
		"Sluice: the request path is not forwarded to provider %s: it holds an encoded \"/\" or \"\\\", a control character, a \".\" or \"..\" segment, or a broken %-escape"},
	outBodyTooLarge: {"request_too_large", false, fasthttp.StatusRequestEntityTooLarge, HeaderError, "request_too_large", raNone, true,
		feedback.ErrTypeTooLarge, "Sluice: the request body is larger than this proxy accepts for provider %s (server.max_request_body)"},
	outBufferBudget: {"buffer_budget", false, fasthttp.StatusServiceUnavailable, HeaderRejected, "buffer_budget", raOne, false,
		feedback.ErrTypeOverloaded, "Sluice: the proxy holds as many request bodies as its memory budget allows (server.max_buffered_bytes); %r"},
	// Not final: a body cut short may arrive whole on another try.
	outBadRequestBody: {"bad_request_body", false, fasthttp.StatusBadRequest, HeaderError, "bad_request_body", raNone, false,
		feedback.ErrTypeInvalidRequest, "Sluice: the request body for provider %s could not be read (malformed chunked encoding, or cut short)"},
	// Not final: a body sent too slowly may arrive in time on another try.
	outBodyTimeout: {"body_timeout", false, fasthttp.StatusRequestTimeout, HeaderError, "body_timeout", raNone, false,
		feedback.ErrTypeTimeout, "Sluice: the request body for provider %s did not arrive in time (server.body_timeout, server.min_body_rate)"},
	outHeadersTooLarge: {"headers_too_large", false, fasthttp.StatusRequestHeaderFieldsTooLarge, HeaderError, "headers_too_large", raNone, true,
		feedback.ErrTypeInvalidRequest, "Sluice: the request headers are larger than this proxy accepts"},
	outRateLimitedProvider: {"rate_limit_provider", false, fasthttp.StatusTooManyRequests, HeaderRejected, "rate_limit_provider", raComputed, false,
		feedback.ErrTypeRateLimit, "Sluice: provider %s's rate limit (requests or tokens per minute) has no room for this request within the queue's max_wait; %r"},
	outRateLimitedClient: {"rate_limit_client", false, fasthttp.StatusTooManyRequests, HeaderRejected, "rate_limit_client", raComputed, false,
		feedback.ErrTypeRateLimit, "Sluice: your rate limit for provider %s (requests or tokens per minute per client) has no room for this request within the queue's max_wait; %r"},
	outRateLimitedUpstream: {"rate_limit_upstream", false, fasthttp.StatusTooManyRequests, HeaderRejected, "rate_limit_upstream", raComputed, false,
		feedback.ErrTypeRateLimit, "Sluice: provider %s's quota (as the provider reports it, or as configured) has no room for this request within the queue's max_wait; %r"},
	outOverQuota: {"over_quota", false, fasthttp.StatusTooManyRequests, HeaderRejected, "over_quota", raNone, true,
		feedback.ErrTypeRateLimit, "Sluice: this request needs more tokens (prompt estimate plus max_tokens) than provider %s's rate limit allows in a whole minute; it cannot be sent as it is"},
	outNoUpstream: {"no_upstream", false, fasthttp.StatusServiceUnavailable, HeaderRejected, "no_upstream", raComputed, false,
		feedback.ErrTypeOverloaded, "Sluice: every upstream of provider %s is failing (circuit breakers open); %r"},
	outUnknownClient: {"unknown_client", false, fasthttp.StatusUnauthorized, HeaderError, "unknown_client", raNone, true,
		feedback.ErrTypeAuthentication, "Sluice: this API key is not one of the clients this proxy serves"},
	outProviderNotAllowed: {"provider_not_allowed", false, fasthttp.StatusForbidden, HeaderError, "provider_not_allowed", raNone, true,
		feedback.ErrTypePermission, "Sluice: this client may not use provider %s"},

	outComplete:   {label: "complete", admitted: true},
	outClientGone: {label: "client_gone", admitted: true},
	outUpstreamUnreachable: {"upstream_unreachable", true, fasthttp.StatusBadGateway, HeaderError, "upstream_unreachable", raNone, false,
		feedback.ErrTypeServer, "Sluice: provider %s could not be reached or closed the connection before answering"},
	outFirstTokenTimeout: {"first_token_timeout", true, fasthttp.StatusGatewayTimeout, HeaderError, "first_token_timeout", raNone, false,
		feedback.ErrTypeTimeout, "Sluice: provider %s did not answer within the first-token timeout"},
	outUpstreamTimeout: {"upstream_timeout", true, fasthttp.StatusGatewayTimeout, HeaderError, "upstream_timeout", raNone, false,
		feedback.ErrTypeTimeout, "Sluice: provider %s did not finish its response within the total timeout"},
	outBadUpstreamBody: {"upstream_bad_response", true, fasthttp.StatusBadGateway, HeaderError, "upstream_bad_response", raNone, false,
		feedback.ErrTypeServer, "Sluice: provider %s sent a response Sluice could not relay"},
	outIdleTimeout:   {label: "idle_timeout", admitted: true},
	outTotalTimeout:  {label: "total_timeout", admitted: true},
	outUpstreamBroke: {label: "upstream_broke", admitted: true},
	outShutdown: {"shutdown", true, fasthttp.StatusServiceUnavailable, HeaderError, "shutting_down", raOne, false,
		feedback.ErrTypeOverloaded, "Sluice: the proxy is shutting down; retry on another instance"},
	outClientSlow: {label: "client_slow", admitted: true},
	outAborted:    {label: "aborted", admitted: true},
}

func (o outcome) String() string { return outcomes[o].label }

// Header names Sluice sets on answers it produces itself.
const (
	// HeaderRejected is set on refusals that Sluice (not the upstream)
	// produced for lack of capacity: over_share (429: the provider has
	// capacity, this flow is over its share); queue_full, queue_timeout,
	// queue_deadline, displaced (503: the provider is at its limit);
	// rate_limit_provider, rate_limit_client, rate_limit_upstream (429; the
	// value names the rate limit's scope) and over_quota (429); and
	// buffer_budget (503: Sluice's own memory budget is full) and
	// no_upstream (503: every upstream's breaker is open).
	HeaderRejected = "X-Sluice-Rejected"
	// HeaderError is set on other errors Sluice produced: no_route,
	// upstream_unreachable, first_token_timeout, upstream_bad_response,
	// upstream_timeout, shutting_down, method_not_allowed, bad_path,
	// request_too_large, bad_request_body, body_timeout, headers_too_large,
	// unknown_client (401), provider_not_allowed (403).
	HeaderError = "X-Sluice-Error"
	// HeaderShouldRetry is "false" on Sluice's answers that a retry of the
	// same request cannot change (outcomeSpec.final): no_route,
	// method_not_allowed, bad_path, request_too_large, headers_too_large,
	// over_quota, unknown_client and provider_not_allowed. The OpenAI and Anthropic SDKs read it before their
	// own rules (which retry every 429). It is never "true": the SDKs'
	// own rules already retry Sluice's other refusals.
	HeaderShouldRetry = "X-Should-Retry"
)

// errorBodies holds the JSON error bodies of one provider for every
// outcome that answers, in every dialect's shape, built when the config is
// applied so the request path only copies bytes:
// [dialect][with Retry-After][outcome]. The two halves differ only where
// the message tells what to do (%r); elsewhere they share one slice. The
// zero Dialect gets OpenAIChat's shape, as feedback.Dialect.Spec does.
type errorBodies [][2][numOutcomes][]byte

func buildErrorBodies(provider string) *errorBodies {
	name := provider
	if name == "" {
		name = "(none)"
	}
	ds := feedback.Dialects()
	b := make(errorBodies, len(ds)+1)
	for _, d := range append([]feedback.Dialect{0}, ds...) {
		spec := d.Spec()
		for o := outcome(0); o < numOutcomes; o++ {
			sp := outcomes[o]
			if sp.status == 0 || sp.message == "" {
				continue // no answer, or an answer without a body
			}
			for ra, hint := range [2]string{hintBackoff, hintRetryAfter} {
				if ra == 1 && !strings.Contains(sp.message, "%r") {
					b[d][1][o] = b[d][0][o]
					break
				}
				msg := expandMessage(sp.message, name, hint)
				b[d][ra][o] = spec.ErrorBody(msg, spec.ErrorTypes[sp.errType], sp.reason)
			}
		}
	}
	return &b
}

// expandMessage replaces a message's %s with the provider name and its %r
// with hint; any other % stays as it is.
func expandMessage(msg, name, hint string) string {
	var sb strings.Builder
	for i := 0; i < len(msg); i++ {
		if msg[i] == '%' && i+1 < len(msg) {
			switch msg[i+1] {
			case 's':
				sb.WriteString(name)
				i++
				continue
			case 'r':
				sb.WriteString(hint)
				i++
				continue
			}
		}
		sb.WriteByte(msg[i])
	}
	return sb.String()
}

// answer writes Sluice's own answer for o in the dialect's shape: status,
// reason header, Retry-After and body. Outcomes without a status write
// nothing. retryAfter > 0 is sent as Retry-After in whole seconds, rounded
// up (at least 1), and as retry-after-ms, which the OpenAI and Anthropic
// SDKs prefer; the body's message then points at it (hintRetryAfter),
// and otherwise tells the client to back off (hintBackoff). A final
// outcome says "x-should-retry: false", which both SDKs obey.
func answer(ctx *fasthttp.RequestCtx, bodies *errorBodies, d feedback.Dialect, o outcome, retryAfter time.Duration) {
	sp := &outcomes[o]
	if sp.status == 0 {
		return
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(sp.status)
	if sp.header != "" {
		ctx.Response.Header.Set(sp.header, sp.reason)
	}
	if sp.status == fasthttp.StatusMethodNotAllowed || sp.status == fasthttp.StatusNoContent {
		// 405 must say what is allowed (RFC 9110 §15.5.6), and so says
		// Sluice's answer to OPTIONS, its only 204.
		ctx.Response.Header.Set("Allow", allowedMethods)
	}
	if sp.final {
		ctx.Response.Header.Set(HeaderShouldRetry, "false")
	}
	ra := 0
	if retryAfter > 0 {
		ra = 1
		var buf [20]byte
		sec := (retryAfter + time.Second - 1) / time.Second
		ctx.Response.Header.SetBytesV("Retry-After", strconv.AppendInt(buf[:0], int64(sec), 10))
		ms := (retryAfter + time.Millisecond - 1) / time.Millisecond
		ctx.Response.Header.SetBytesV("Retry-After-Ms", strconv.AppendInt(buf[:0], int64(ms), 10))
	}
	if int(d) >= len(*bodies) {
		d = 0
	}
	if b := (*bodies)[d][ra][o]; b != nil {
		ctx.SetContentType("application/json")
		ctx.SetBody(b)
	}
}
