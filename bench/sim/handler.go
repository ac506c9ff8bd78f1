package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// Request headers understood by the simulator (see package doc).
const (
	HeaderPromptTokens  = "x-sim-prompt-tokens"
	HeaderOutputTokens  = "x-sim-output-tokens"
	HeaderTTFT          = "x-sim-ttft"
	HeaderITL           = "x-sim-itl"
	HeaderFail          = "x-sim-fail"
	HeaderFailAfter     = "x-sim-fail-after"
	HeaderSilentHeaders = "x-sim-silent-headers"
)

// apiRequest holds the request fields the simulator reads; the rest of the
// body only counts towards the prompt size.
type apiRequest struct {
	Model               string `json:"model"`
	Stream              bool   `json:"stream"`
	MaxTokens           *int   `json:"max_tokens"`
	MaxCompletionTokens *int   `json:"max_completion_tokens"`
	MaxOutputTokens     *int   `json:"max_output_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// dialectOf picks the dialect by path suffix; 0 if none matches.
func dialectOf(path []byte) Dialect {
	switch {
	case bytes.HasSuffix(path, []byte("/chat/completions")):
		return OpenAI
	case bytes.HasSuffix(path, []byte("/messages")):
		return Anthropic
	case bytes.HasSuffix(path, []byte("/responses")):
		return Responses
	}
	return 0
}

// Handler serves the simulated API. It may be mounted in any fasthttp
// server; streams outlive the call (their body is written by fasthttp after
// Handler returns) and end on their own, on client disconnect or on Close.
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	if bytes.HasPrefix(path, []byte("/sim/")) {
		s.admin(ctx)
		return
	}
	d := dialectOf(path)
	if d == 0 {
		writeJSON(ctx, fasthttp.StatusNotFound, errorBody(OpenAI, "invalid_request_error", "unknown_url",
			"Unknown request URL: "+string(path)))
		return
	}
	n := s.arrive()
	cfg := s.cfg.Load()
	r := &request{s: s, cfg: cfg, n: n, at: time.Now(), dialect: d, ttft: -1, itl: -1}
	badRequest := func(msg string) {
		writeJSON(ctx, fasthttp.StatusBadRequest, errorBody(d, "invalid_request_error", "", msg))
		s.finish(&r.t, outError)
	}
	if !ctx.IsPost() {
		ctx.Response.Header.Set("Allow", "POST")
		writeJSON(ctx, fasthttp.StatusMethodNotAllowed, errorBody(d, "invalid_request_error", "", "method not allowed; use POST"))
		s.finish(&r.t, outError)
		return
	}
	body := ctx.PostBody()
	var req apiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		badRequest("request body is not valid JSON: " + err.Error())
		return
	}
	maxTokens, err := req.maxTokens(d)
	if err != nil {
		badRequest(err.Error())
		return
	}
	h, err := parseSimHeaders(&ctx.Request.Header)
	if err != nil {
		badRequest(err.Error())
		return
	}

	// Draws in a fixed order, whatever the overrides (see package doc).
	r.rng = rand.New(rand.NewPCG(cfg.Seed, n))
	drawn := drawOutput(r.rng, cfg)
	r.ttftJitter = lognormal(r.rng, cfg.JitterSigma)
	roll := r.rng.Float64()

	r.stream = req.Stream
	r.includeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	r.prompt = len(body) / 4
	if h.prompt >= 0 {
		r.prompt = h.prompt
	}
	r.output = drawn
	if h.output >= 0 {
		r.output = h.output
	}
	if maxTokens > 0 && r.output > maxTokens {
		r.output, r.length = maxTokens, true
	}
	r.ttft, r.itl, r.silent = h.ttft, h.itl, h.silent
	r.fault, r.faultAfter = h.fault, h.faultAfter
	if r.fault == FaultNone && cfg.Fault.Kind != FaultNone && roll < cfg.Fault.Rate {
		r.fault, r.faultAfter = cfg.Fault.Kind, cfg.Fault.After
	}
	if r.faultAfter < 0 {
		r.faultAfter = DefaultResetAfter
	}

	switch r.fault {
	case FaultHang:
		s.hang(ctx, r)
		return
	case Fault429, Fault500, Fault502, Fault503, Fault529:
		s.failStatus(ctx, r)
		return
	}

	quotaTokens := r.prompt + r.output
	if maxTokens > 0 {
		quotaTokens = r.prompt + maxTokens
	}
	qk := quotaKey(cfg, &ctx.Request.Header, req.Model)
	dec, wait := s.admit(&r.t, cfg, qk, quotaTokens)
	switch dec {
	case rejectQuotaLimit:
		s.quotaRefusal(ctx, cfg, d, qk, req.Model, quotaTokens, wait)
		s.finish(&r.t, out429)
		return
	case rejectQuota:
		if d == Anthropic {
			writeJSON(ctx, fasthttp.StatusBadRequest, errorBody(d, "invalid_request_error", "",
				"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."))
			s.finish(&r.t, outError)
			return
		}
		writeJSON(ctx, fasthttp.StatusTooManyRequests, errorBody(d, "insufficient_quota", "insufficient_quota",
			"You exceeded your current quota, please check your plan and billing details."))
		s.finish(&r.t, out429)
		return
	case rejectRate:
		setRetryAfter(ctx, cfg)
		if d == Anthropic {
			writeJSON(ctx, fasthttp.StatusTooManyRequests, errorBody(d, "rate_limit_error", "",
				"This request would exceed your organization's rate limit of requests per minute. Please try again later."))
		} else {
			writeJSON(ctx, fasthttp.StatusTooManyRequests, errorBody(d, "requests", "rate_limit_exceeded",
				fmt.Sprintf("Rate limit reached for %s on requests per second (RPS): Limit %g. Please try again later.", modelName(req.Model), cfg.RateLimitRPS)))
		}
		s.finish(&r.t, out429)
		return
	case rejectOverload:
		setRetryAfter(ctx, cfg)
		if d == Anthropic {
			writeJSON(ctx, 529, errorBody(d, "overloaded_error", "", "Overloaded"))
			s.finish(&r.t, out529)
			return
		}
		writeJSON(ctx, fasthttp.StatusTooManyRequests, errorBody(d, "requests", "rate_limit_exceeded",
			"Rate limit reached for "+modelName(req.Model)+" on requests: the server is at capacity. Please try again later."))
		s.finish(&r.t, out429)
		return
	}

	s.quotaHeaders(ctx, cfg, qk)
	r.conn = peekable(ctx.Conn())
	r.enc = newEncoder(d, n, cfg.Clock().Unix(), jsonString(modelName(req.Model)), r.prompt, r.includeUsage, r.length)
	ctx.Response.Header.Set("x-request-id", "req_sim_"+strconv.FormatUint(n, 10))
	if r.stream {
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.Response.Header.SetContentType("text/event-stream; charset=utf-8")
		ctx.Response.Header.Set("Cache-Control", "no-cache")
		ctx.Response.ImmediateHeaderFlush = !r.silent
		ctx.Response.SetBodyStream(&streamBody{r: r}, -1)
		return
	}
	if err := r.generate(); err != nil {
		drop(ctx)
		s.finish(&r.t, outcomeOf(err))
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, r.enc.body(r.output))
	out := uint64(r.output)
	s.count(func(st *Stats) { st.OutputTokens += out })
	s.finish(&r.t, outCompleted)
}

// maxTokens returns the output cap the request asks for (0 if none).
func (req *apiRequest) maxTokens(d Dialect) (int, error) {
	var p *int
	var name string
	switch d {
	case OpenAI:
		p, name = req.MaxCompletionTokens, "max_completion_tokens"
		if p == nil {
			p, name = req.MaxTokens, "max_tokens"
		}
	case Anthropic:
		p, name = req.MaxTokens, "max_tokens"
	case Responses:
		p, name = req.MaxOutputTokens, "max_output_tokens"
	}
	if p == nil {
		return 0, nil
	}
	if *p < 1 {
		return 0, fmt.Errorf("%s: must be at least 1, got %d", name, *p)
	}
	return *p, nil
}

func modelName(m string) string {
	if m == "" {
		return "sim-model"
	}
	return m
}

// simHeaders are the parsed x-sim-* overrides; negative means unset.
type simHeaders struct {
	prompt, output int
	ttft, itl      time.Duration
	fault          FaultKind
	faultAfter     int
	silent         bool
}

func parseSimHeaders(h *fasthttp.RequestHeader) (simHeaders, error) {
	sh := simHeaders{prompt: -1, output: -1, ttft: -1, itl: -1, faultAfter: -1}
	var err error
	if sh.prompt, err = intHeader(h, HeaderPromptTokens); err != nil {
		return sh, err
	}
	if sh.output, err = intHeader(h, HeaderOutputTokens); err != nil {
		return sh, err
	}
	if sh.faultAfter, err = intHeader(h, HeaderFailAfter); err != nil {
		return sh, err
	}
	if sh.ttft, err = durHeader(h, HeaderTTFT); err != nil {
		return sh, err
	}
	if sh.itl, err = durHeader(h, HeaderITL); err != nil {
		return sh, err
	}
	if v := h.Peek(HeaderFail); len(v) > 0 {
		sh.fault = FaultKind(v)
		if !sh.fault.valid() {
			return sh, fmt.Errorf("%s: unknown fault %q", HeaderFail, v)
		}
	}
	if v := string(h.Peek(HeaderSilentHeaders)); v != "" && v != "0" && v != "false" {
		sh.silent = true
	}
	return sh, nil
}

// intHeader parses a non-negative integer header; -1 if absent.
func intHeader(h *fasthttp.RequestHeader, name string) (int, error) {
	v := h.Peek(name)
	if len(v) == 0 {
		return -1, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 0 {
		return -1, fmt.Errorf("%s: want a non-negative integer, got %q", name, v)
	}
	return n, nil
}

// durHeader parses a non-negative Go duration header; -1 if absent.
func durHeader(h *fasthttp.RequestHeader, name string) (time.Duration, error) {
	v := h.Peek(name)
	if len(v) == 0 {
		return -1, nil
	}
	d, err := time.ParseDuration(string(v))
	if err != nil || d < 0 {
		return -1, fmt.Errorf("%s: want a non-negative Go duration like 500ms, got %q", name, v)
	}
	return d, nil
}

// failStatus answers an x-sim-fail status fault at once.
func (s *Server) failStatus(ctx *fasthttp.RequestCtx, r *request) {
	d := r.dialect
	switch r.fault {
	case Fault429:
		setRetryAfter(ctx, r.cfg)
		typ, code := "requests", "rate_limit_exceeded"
		if d == Anthropic {
			typ, code = "rate_limit_error", ""
		}
		writeJSON(ctx, fasthttp.StatusTooManyRequests, errorBody(d, typ, code, "Rate limit reached (injected)."))
		s.finish(&r.t, out429)
	case Fault529:
		setRetryAfter(ctx, r.cfg)
		writeJSON(ctx, 529, errorBody(d, "overloaded_error", "", "Overloaded"))
		s.finish(&r.t, out529)
	case Fault500:
		typ := "server_error"
		if d == Anthropic {
			typ = "api_error"
		}
		writeJSON(ctx, fasthttp.StatusInternalServerError, errorBody(d, typ, "",
			"The server had an error while processing your request. Sorry about that!"))
		s.finish(&r.t, outError)
	case Fault502:
		typ := "server_error"
		if d == Anthropic {
			typ = "api_error"
		}
		writeJSON(ctx, fasthttp.StatusBadGateway, errorBody(d, typ, "", "Bad gateway."))
		s.finish(&r.t, outError)
	case Fault503:
		typ := "server_error"
		if d == Anthropic {
			typ = "api_error"
		}
		writeJSON(ctx, fasthttp.StatusServiceUnavailable, errorBody(d, typ, "",
			"The engine is currently overloaded, please try again later."))
		s.finish(&r.t, outError)
	}
}

// hang holds a FaultHang request, sending nothing, until the client leaves,
// the server closes or HangTimeout passes; then drops the connection.
func (s *Server) hang(ctx *fasthttp.RequestCtx, r *request) {
	r.conn = peekable(ctx.Conn())
	err := r.sleepUntil(time.Now().Add(r.cfg.scale(r.cfg.HangTimeout)))
	r.stopTimer()
	drop(ctx)
	s.count(func(st *Stats) { st.Hangs++ })
	o := outError
	if errors.Is(err, errAborted) {
		o = outAborted
	}
	s.finish(&r.t, o)
}

// drop makes fasthttp close the connection without writing a response.
func drop(ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {})
}

// setRetryAfter sets retry-after (whole real seconds, rounded up, at least 1)
// and retry-after-ms (real milliseconds) from cfg.RetryAfter, unless it is
// negative.
func setRetryAfter(ctx *fasthttp.RequestCtx, cfg *Config) {
	if cfg.RetryAfter < 0 {
		return
	}
	d := cfg.scale(cfg.RetryAfter)
	secs := max(1, int64(math.Ceil(d.Seconds())))
	ctx.Response.Header.Set("retry-after", strconv.FormatInt(secs, 10))
	ctx.Response.Header.Set("retry-after-ms", strconv.FormatInt(max(1, d.Milliseconds()), 10))
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	if status == 529 {
		ctx.Response.Header.SetStatusMessage([]byte("Overloaded")) // fasthttp knows no text for 529
	}
	ctx.Response.Header.SetContentType("application/json")
	ctx.SetBody(body)
}

// admin serves GET /sim/stats and POST /sim/capacity?c=N (or
// ?schedule=40,20@60s).
func (s *Server) admin(ctx *fasthttp.RequestCtx) {
	switch string(ctx.Path()) {
	case "/sim/stats":
		b, _ := json.Marshal(s.Stats()) // Stats always marshals
		writeJSON(ctx, fasthttp.StatusOK, b)
		return
	case "/sim/capacity":
		if !ctx.IsPost() {
			break
		}
		args := ctx.QueryArgs()
		if v := args.Peek("schedule"); len(v) > 0 {
			steps, err := ParseSchedule(string(v))
			if err != nil {
				writeJSON(ctx, fasthttp.StatusBadRequest, errorBody(OpenAI, "invalid_request_error", "", err.Error()))
				return
			}
			s.SetSchedule(steps)
		} else {
			c, err := strconv.Atoi(string(args.Peek("c")))
			if err != nil || c < 0 {
				writeJSON(ctx, fasthttp.StatusBadRequest, errorBody(OpenAI, "invalid_request_error", "", "want ?c=N (N >= 0) or ?schedule=..."))
				return
			}
			s.SetCapacity(c)
		}
		b, _ := json.Marshal(s.Stats())
		writeJSON(ctx, fasthttp.StatusOK, b)
		return
	}
	writeJSON(ctx, fasthttp.StatusNotFound, errorBody(OpenAI, "invalid_request_error", "unknown_url", "Unknown request URL: "+string(ctx.Path())))
}
