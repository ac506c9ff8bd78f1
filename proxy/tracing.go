package proxy

import (
	"bytes"
	"encoding/hex"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unsafe"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of Sluice's spans.
const TracerName = "github.com/sluicehq/sluice/proxy"

// Span attribute keys. The gen_ai.* keys follow the OpenTelemetry GenAI
// semantic conventions; sluice.* are Sluice's own. Nothing here ever holds
// an API key, a prompt or a completion.
const (
	attrGenAIProvider      = attribute.Key("gen_ai.provider.name")
	attrGenAIOperation     = attribute.Key("gen_ai.operation.name")
	attrGenAIRequestModel  = attribute.Key("gen_ai.request.model")
	attrGenAIMaxTokens     = attribute.Key("gen_ai.request.max_tokens")
	attrGenAIResponseModel = attribute.Key("gen_ai.response.model")
	attrGenAIInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	attrGenAIOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	attrGenAIFinishReasons = attribute.Key("gen_ai.response.finish_reasons")
	attrErrorType          = attribute.Key("error.type")
	attrHTTPMethod         = attribute.Key("http.request.method")
	attrHTTPStatus         = attribute.Key("http.response.status_code")
	attrServerAddress      = attribute.Key("server.address")
	attrServerPort         = attribute.Key("server.port")

	attrProvider       = attribute.Key("sluice.provider")
	attrStream         = attribute.Key("sluice.stream")
	attrPromptEstimate = attribute.Key("sluice.prompt_tokens_estimate")
	attrQueueWait      = attribute.Key("sluice.queue_wait_seconds")
	attrLimit          = attribute.Key("sluice.limit")
	attrInflight       = attribute.Key("sluice.inflight")
	attrTTFT           = attribute.Key("sluice.ttft_seconds")
	attrOutputDeltas   = attribute.Key("sluice.output_deltas")
	attrEndReason      = attribute.Key("sluice.end_reason")
	attrRejected       = attribute.Key("sluice.rejected")
	attrClass          = attribute.Key("sluice.class")
	attrUpstream       = attribute.Key("sluice.upstream")
	attrAttempt        = attribute.Key("sluice.attempt")
	attrRetry          = attribute.Key("sluice.retry")
)

// eventFirstToken is the span event at a stream's first output token.
const eventFirstToken = "gen_ai.first_token"

var (
	serverSpanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientSpanOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	traceContext   = propagation.TraceContext{}
)

// providerTracing is what a provider's spans need, built at Apply.
type providerTracing struct {
	tracer     trace.Tracer
	sampler    sdktrace.Sampler     // set when the provider is a *TracerProvider
	serverName string               // server span name: "proxy <provider>"
	common     []attribute.KeyValue // on both spans
}

func newProviderTracing(t trace.Tracer, sampler sdktrace.Sampler, p *provider) *providerTracing {
	pt := &providerTracing{
		tracer:     t,
		sampler:    sampler,
		serverName: "proxy " + p.name,
		common: []attribute.KeyValue{
			attrProvider.String(p.name),
			attrGenAIProvider.String(genAIProviderName(p)),
		},
	}
	return pt
}

// upstreamSpanAttrs are the attributes of the client spans of the
// attempts sent to up: server.address, server.port, sluice.upstream.
func upstreamSpanAttrs(up *upstream) []attribute.KeyValue {
	host, port := string(up.host), 0
	if h, ps, err := net.SplitHostPort(host); err == nil {
		host = h
		port, _ = strconv.Atoi(ps)
	} else if string(up.scheme) == "https" {
		port = 443
	} else {
		port = 80
	}
	return []attribute.KeyValue{attrServerAddress.String(host), attrServerPort.Int(port), attrUpstream.String(up.name)}
}

// genAIProviderName is gen_ai.provider.name: the well-known value for the
// big hosted APIs, recognised by upstream host, else the configured
// provider name (an OpenAI-compatible server is not "openai").
func genAIProviderName(p *provider) string {
	u, err := url.Parse(upstreamConfigs(&p.cfg)[0].URL)
	if err != nil {
		return p.name
	}
	h := strings.ToLower(u.Hostname())
	switch {
	case h == "api.openai.com":
		return "openai"
	case strings.HasSuffix(h, ".openai.azure.com"):
		return "azure.ai.openai"
	case h == "api.anthropic.com":
		return "anthropic"
	case h == "generativelanguage.googleapis.com":
		return "gcp.gemini"
	case strings.HasSuffix(h, "aiplatform.googleapis.com"):
		return "gcp.vertex_ai"
	case strings.HasPrefix(h, "bedrock-runtime.") && strings.HasSuffix(h, ".amazonaws.com"):
		return "aws.bedrock"
	case h == "api.mistral.ai":
		return "mistral_ai"
	case h == "api.groq.com":
		return "groq"
	case h == "api.deepseek.com":
		return "deepseek"
	case h == "api.x.ai":
		return "x_ai"
	case h == "api.perplexity.ai":
		return "perplexity"
	case h == "api.cohere.com", h == "api.cohere.ai":
		return "cohere"
	}
	return p.name
}

// operationName is gen_ai.operation.name for a request path (after the
// route prefix): embeddings, text_completion, or chat (Chat Completions,
// Responses and Anthropic Messages).
func operationName(path []byte) string {
	if q := bytes.IndexByte(path, '?'); q >= 0 {
		path = path[:q]
	}
	switch {
	case bytes.HasSuffix(path, []byte("/embeddings")):
		return "embeddings"
	case bytes.HasSuffix(path, []byte("/completions")) && !bytes.HasSuffix(path, []byte("/chat/completions")):
		return "text_completion"
	}
	return "chat"
}

// headerCarrier is a propagation.TextMapCarrier over a fasthttp request
// header, for extracting the client's W3C trace context.
type headerCarrier struct{ h *fasthttp.RequestHeader }

// Get returns the header's value. traceparent is returned without a copy:
// the propagator parses it into fixed arrays at once and keeps nothing of
// it. Other values (tracestate is kept by the span context) are copied.
func (c headerCarrier) Get(key string) string {
	v := c.h.Peek(key)
	if len(v) == 0 {
		return ""
	}
	if key == "traceparent" {
		return unsafe.String(&v[0], len(v))
	}
	return string(v)
}

func (c headerCarrier) Set(key, value string) { c.h.Set(key, value) }

func (c headerCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

var (
	hdrTraceparent = []byte("traceparent")
	hdrTracestate  = []byte("tracestate")
)

// injectTraceContext sets the W3C traceparent (and tracestate) headers for
// sc on h, replacing what the client sent. Same output as
// propagation.TraceContext.Inject, without allocating for traceparent.
func injectTraceContext(h *fasthttp.RequestHeader, sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	var buf [55]byte // 00-<32 hex>-<16 hex>-<2 hex>
	b := append(buf[:0], "00-"...)
	tid, sid := sc.TraceID(), sc.SpanID()
	b = hex.AppendEncode(b, tid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, sid[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))})
	h.SetBytesKV(hdrTraceparent, b)
	if ts := sc.TraceState(); ts.Len() > 0 {
		h.SetBytesKV(hdrTracestate, []byte(ts.String()))
	} else {
		h.DelBytes(hdrTracestate)
	}
}
