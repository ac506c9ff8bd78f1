package sim

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// Quota is an account's per-minute limits, as hosted providers enforce
// them: requests per minute and tokens per minute. A request's tokens are
// its prompt plus its max_tokens (the output it will produce when it names
// none), taken when it is admitted and never given back. Each limit is a
// bucket of a minute's worth that refills continuously. A request that
// does not fit either is answered 429 (OpenAI rate_limit_exceeded,
// Anthropic rate_limit_error) with retry-after-ms and retry-after saying
// when it would. Every answer carries what is left in the style of
// Headers.
//
// The minute is real time (60 s x TimeScale): run a quota at TimeScale 1
// for Sluice to learn it as providers report it.
type Quota struct {
	// RPM and TPM are the limits; 0 leaves a dimension unlimited.
	RPM, TPM int
	// Headers is the style of the rate-limit headers on every answer:
	// QuotaHeadersOpenAI, QuotaHeadersAnthropic, or "" for none.
	Headers string
	// Per says what one quota is: "" (one for every request), QuotaPerKey
	// (each API key its own account, as hosted providers count),
	// QuotaPerModel (each model its own bucket, as they count within an
	// account) or QuotaPerKeyModel (both). Each has the limits above.
	Per string
}

// Values of Quota.Per.
const (
	QuotaPerKey      = "key"
	QuotaPerModel    = "model"
	QuotaPerKeyModel = "key+model"
)

// maxQuotas bounds the quotas kept apart; requests beyond share one.
const maxQuotas = 4096

// quotaKey is the quota a request is counted in, by c.Quota.Per: its API
// key (Authorization or x-api-key) and/or its model; "" for the one
// shared quota.
func quotaKey(c *Config, h *fasthttp.RequestHeader, model string) string {
	key := func() string {
		if v := h.Peek("Authorization"); len(v) > 0 {
			return string(v)
		}
		return string(h.Peek("x-api-key"))
	}
	switch c.Quota.Per {
	case QuotaPerKey:
		return key()
	case QuotaPerModel:
		return "\x00" + model
	case QuotaPerKeyModel:
		return key() + "\x00" + model
	}
	return ""
}

// quotaOfLocked returns the quota of key, started full at its first
// request.
func (s *Server) quotaOfLocked(c *Config, key string) *quotaState {
	if key == "" {
		return &s.quota
	}
	q := s.quotas[key]
	if q == nil {
		if len(s.quotas) >= maxQuotas {
			return &s.quota
		}
		if s.quotas == nil {
			s.quotas = map[string]*quotaState{}
		}
		q = newQuotaState(c)
		s.quotas[key] = q
	}
	return q
}

// Styles of Quota.Headers.
const (
	// QuotaHeadersOpenAI: x-ratelimit-{limit,remaining,reset}-{requests,tokens},
	// the reset as a duration ("1.5s", "6m0s").
	QuotaHeadersOpenAI = "openai"
	// QuotaHeadersAnthropic: anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset},
	// the reset as an RFC 3339 time.
	QuotaHeadersAnthropic = "anthropic"
)

// quotaState is the quota's two buckets (guarded by Server.mu).
type quotaState struct {
	req, tok quotaBucket
}

// quotaBucket holds level tokens of capacity at at, refilling capacity per
// window.
type quotaBucket struct {
	capacity float64
	level    float64
	at       time.Time
}

func (b *quotaBucket) refill(now time.Time, window time.Duration) {
	if b.capacity <= 0 {
		return
	}
	if el := now.Sub(b.at); el > 0 {
		b.level = math.Min(b.capacity, b.level+b.capacity*float64(el)/float64(window))
	}
	b.at = now
}

// wait is how long until n fits (0: now).
func (b *quotaBucket) wait(n float64, window time.Duration) time.Duration {
	if b.capacity <= 0 || b.level >= n {
		return 0
	}
	return time.Duration((n - b.level) / b.capacity * float64(window))
}

// full is how long until the bucket is full again.
func (b *quotaBucket) full(window time.Duration) time.Duration {
	return time.Duration((b.capacity - b.level) / b.capacity * float64(window))
}

func (s *Server) resetQuotaLocked(c *Config) {
	s.quota = *newQuotaState(c)
	s.quotas = nil
}

// newQuotaState is a full quota of c's limits.
func newQuotaState(c *Config) *quotaState {
	now := c.Clock()
	return &quotaState{
		req: quotaBucket{capacity: float64(c.Quota.RPM), level: float64(c.Quota.RPM), at: now},
		tok: quotaBucket{capacity: float64(c.Quota.TPM), level: float64(c.Quota.TPM), at: now},
	}
}

// quotaWindow is the quota's minute in real time.
func quotaWindow(c *Config) time.Duration { return c.scale(time.Minute) }

// takeQuotaLocked admits a request of tokens to the quota of key, or says
// how long until it would fit.
func (s *Server) takeQuotaLocked(c *Config, key string, tokens int) (time.Duration, bool) {
	if c.Quota.RPM <= 0 && c.Quota.TPM <= 0 {
		return 0, true
	}
	now, w := c.Clock(), quotaWindow(c)
	q := s.quotaOfLocked(c, key)
	q.req.refill(now, w)
	q.tok.refill(now, w)
	if wait := max(q.req.wait(1, w), q.tok.wait(float64(tokens), w)); wait > 0 {
		return wait, false
	}
	if q.req.capacity > 0 {
		q.req.level--
	}
	if q.tok.capacity > 0 {
		q.tok.level -= float64(tokens)
	}
	s.st.QuotaRequests++
	s.st.QuotaTokens += uint64(tokens)
	return 0, true
}

// quotaHeaders sets the rate-limit headers of an answer: what is left now
// of the quota of key.
func (s *Server) quotaHeaders(ctx *fasthttp.RequestCtx, c *Config, key string) {
	if c.Quota.Headers == "" || (c.Quota.RPM <= 0 && c.Quota.TPM <= 0) {
		return
	}
	now, w := c.Clock(), quotaWindow(c)
	s.mu.Lock()
	q := *s.quotaOfLocked(c, key)
	s.mu.Unlock()
	q.req.refill(now, w)
	q.tok.refill(now, w)
	h := &ctx.Response.Header
	set := func(dim string, b quotaBucket) {
		if b.capacity <= 0 {
			return
		}
		limit := strconv.FormatInt(int64(b.capacity), 10)
		remaining := strconv.FormatInt(int64(math.Floor(b.level)), 10)
		reset := b.full(w)
		if c.Quota.Headers == QuotaHeadersAnthropic {
			h.Set("anthropic-ratelimit-"+dim+"-limit", limit)
			h.Set("anthropic-ratelimit-"+dim+"-remaining", remaining)
			h.Set("anthropic-ratelimit-"+dim+"-reset", now.Add(reset).UTC().Format(time.RFC3339))
			return
		}
		h.Set("x-ratelimit-limit-"+dim, limit)
		h.Set("x-ratelimit-remaining-"+dim, remaining)
		h.Set("x-ratelimit-reset-"+dim, reset.Round(time.Millisecond).String())
	}
	set("requests", q.req)
	set("tokens", q.tok)
}

// quotaRefusal answers a request the quota has no room for.
func (s *Server) quotaRefusal(ctx *fasthttp.RequestCtx, c *Config, d Dialect, key, model string, tokens int, wait time.Duration) {
	ms := max(wait.Milliseconds(), 1)
	ctx.Response.Header.Set("retry-after-ms", strconv.FormatInt(ms, 10))
	ctx.Response.Header.Set("retry-after", strconv.FormatInt((ms+999)/1000, 10))
	s.quotaHeaders(ctx, c, key)
	if d == Anthropic {
		writeJSON(ctx, fasthttp.StatusTooManyRequests, errorBody(d, "rate_limit_error", "",
			"This request would exceed your organization's rate limit. Please try again later."))
		return
	}
	writeJSON(ctx, fasthttp.StatusTooManyRequests, errorBody(d, "tokens", "rate_limit_exceeded",
		fmt.Sprintf("Rate limit reached for %s: Limit %d requests and %d tokens per min, Requested %d tokens. Please try again in %dms.",
			modelName(model), c.Quota.RPM, c.Quota.TPM, tokens, ms)))
}
