package feedback

import "time"

// RateLimit is one dimension of a provider's quota (requests, tokens, input
// tokens or output tokens) as one response reported it. A field is valid
// only when its bit is set in Has.
type RateLimit struct {
	// Limit is the quota of the dimension: the most the account may use in
	// the provider's window (a minute for the usual RPM and TPM limits).
	Limit int64
	// Remaining is what the account may still use now.
	Remaining int64
	// Reset is how long until the quota is whole again (OpenAI's
	// x-ratelimit-reset-* durations; Anthropic's RFC 3339 reset time minus
	// the now given to Header). Never negative.
	Reset time.Duration
	// Has says which of Limit, Remaining and Reset the response carried.
	Has uint8
}

// Bits of RateLimit.Has.
const (
	HasLimit uint8 = 1 << iota
	HasRemaining
	HasReset
)

// RateLimits is everything one response said about the account's quota.
// The zero value is "nothing said"; reuse one by assigning RateLimits{}.
//
// OpenAI reports requests and tokens (input and output combined).
// Anthropic reports requests, input tokens and output tokens, and under
// "tokens" the most restrictive of its token limits, which is not a
// bucket of its own: a consumer that follows InputTokens and OutputTokens
// should ignore Tokens when either is present.
type RateLimits struct {
	Requests     RateLimit
	Tokens       RateLimit
	InputTokens  RateLimit
	OutputTokens RateLimit
}

// Any reports whether any rate-limit header was understood.
func (r *RateLimits) Any() bool {
	return r.Requests.Has|r.Tokens.Has|r.InputTokens.Has|r.OutputTokens.Has != 0
}

// Header reads one response header into r, if it is a rate-limit header:
//
//	x-ratelimit-{limit,remaining,reset}-{requests,tokens}               (OpenAI and compatible)
//	anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}
//
// Names are matched without regard to ASCII case. Limit and remaining are
// non-negative integers (a fractional part is dropped). A reset is a
// duration in Go syntax ("6m0s", "1s", "20ms", "1.5s"), a number of
// seconds, a Unix time in seconds (a number of at least 1e9), or an RFC
// 3339 time; times are taken relative to now, and a reset in the past is 0.
// Surrounding spaces and tabs are ignored.
//
// It reports whether name is a rate-limit header whose value was valid; an
// invalid value leaves r unchanged. It never panics and does not allocate.
func (r *RateLimits) Header(name, value []byte, now time.Time) bool {
	if len(name) == 0 || (name[0]|0x20 != 'x' && name[0]|0x20 != 'a') {
		return false // most headers: one byte decides
	}
	d, field, ok := rateHeaderName(name)
	if !ok {
		return false
	}
	var rl *RateLimit
	switch d {
	case dimRequests:
		rl = &r.Requests
	case dimTokens:
		rl = &r.Tokens
	case dimInput:
		rl = &r.InputTokens
	default:
		rl = &r.OutputTokens
	}
	v := trimSP(value)
	switch field {
	case HasReset:
		reset, ok := parseReset(v, now)
		if !ok {
			return false
		}
		rl.Reset = reset
	default:
		n, ok := parseCount(v)
		if !ok {
			return false
		}
		if field == HasLimit {
			rl.Limit = n
		} else {
			rl.Remaining = n
		}
	}
	rl.Has |= field
	return true
}

// Dimensions named by rate-limit headers.
const (
	dimRequests = iota
	dimTokens
	dimInput
	dimOutput
)

const (
	openAIPrefix    = "x-ratelimit-"
	anthropicPrefix = "anthropic-ratelimit-"
)

// rateHeaderName recognises a rate-limit header name: its dimension and
// which field (HasLimit, HasRemaining or HasReset) it carries.
func rateHeaderName(name []byte) (dim int, field uint8, ok bool) {
	switch {
	case hasPrefixFold(name, openAIPrefix):
		// x-ratelimit-<field>-<dim>
		rest := name[len(openAIPrefix):]
		field, rest, ok = cutField(rest, "-")
		if !ok {
			return 0, 0, false
		}
		switch {
		case equalFold(rest, "requests"):
			return dimRequests, field, true
		case equalFold(rest, "tokens"):
			return dimTokens, field, true
		}
	case hasPrefixFold(name, anthropicPrefix):
		// anthropic-ratelimit-<dim>-<field>
		rest := name[len(anthropicPrefix):]
		for _, c := range [...]struct {
			word string
			dim  int
		}{{"requests-", dimRequests}, {"tokens-", dimTokens}, {"input-tokens-", dimInput}, {"output-tokens-", dimOutput}} {
			if hasPrefixFold(rest, c.word) {
				f, tail, ok := cutField(rest[len(c.word):], "")
				if ok && len(tail) == 0 {
					return c.dim, f, true
				}
				return 0, 0, false
			}
		}
	}
	return 0, 0, false
}

// cutField reads "limit", "remaining" or "reset" followed by sep at the
// start of b, and returns the rest after sep.
func cutField(b []byte, sep string) (uint8, []byte, bool) {
	for _, c := range [...]struct {
		word  string
		field uint8
	}{{"limit", HasLimit}, {"remaining", HasRemaining}, {"reset", HasReset}} {
		w := len(c.word)
		if len(b) >= w+len(sep) && equalFold(b[:w], c.word) && string(b[w:w+len(sep)]) == sep {
			return c.field, b[w+len(sep):], true
		}
	}
	return 0, nil, false
}

// equalFold reports whether b equals the lower-case ASCII word w, ignoring
// ASCII case.
func equalFold(b []byte, w string) bool {
	if len(b) != len(w) {
		return false
	}
	for i := range len(b) {
		if lowerASCII(b[i]) != w[i] {
			return false
		}
	}
	return true
}

func hasPrefixFold(b []byte, w string) bool {
	return len(b) >= len(w) && equalFold(b[:len(w)], w)
}

// maxRateCount bounds a parsed limit or remaining count, far above any
// real quota, so that callers can add and multiply counts without
// overflowing.
const maxRateCount = 1 << 40

// parseCount reads digits[.digits] as a non-negative count, dropping the
// fraction and saturating at maxRateCount.
func parseCount(b []byte) (int64, bool) {
	i, n := 0, int64(0)
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if n < maxRateCount {
			n = n*10 + int64(b[i]-'0')
		}
		i++
	}
	if i == 0 {
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := i + 1
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i != len(b) {
		return 0, false
	}
	return min(n, maxRateCount), true
}

// maxReset bounds a parsed reset: no provider window is longer than a few
// days, and the bound keeps arithmetic on it from overflowing.
const maxReset = 400 * 24 * time.Hour

// parseReset reads a reset value in any of the forms Header accepts.
func parseReset(b []byte, now time.Time) (time.Duration, bool) {
	if len(b) == 0 {
		return 0, false
	}
	if t, ok := parseRFC3339(b); ok {
		return clampReset(t.Sub(now)), true
	}
	if n, frac, ok := parseSeconds(b); ok {
		if n >= 1e9 { // a Unix time
			return clampReset(time.Unix(n, 0).Add(frac).Sub(now)), true
		}
		return clampReset(time.Duration(n)*time.Second + frac), true
	}
	if d, ok := parseGoDuration(b); ok {
		return clampReset(d), true
	}
	return 0, false
}

func clampReset(d time.Duration) time.Duration {
	return min(max(d, 0), maxReset)
}

// parseSeconds reads digits[.digits] as whole seconds and a fraction.
// Whole seconds saturate at 1e12 (beyond maxReset and any Unix time).
func parseSeconds(b []byte) (int64, time.Duration, bool) {
	i, n := 0, int64(0)
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if n < 1e12 {
			n = n*10 + int64(b[i]-'0')
		}
		i++
	}
	if i == 0 {
		return 0, 0, false
	}
	var frac time.Duration
	if i < len(b) && b[i] == '.' {
		i++
		start, scale := i, time.Duration(time.Second)
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if scale > 1 {
				scale /= 10
				frac += time.Duration(b[i]-'0') * scale
			}
			i++
		}
		if i == start {
			return 0, 0, false
		}
	}
	if i != len(b) {
		return 0, 0, false
	}
	return n, frac, true
}
