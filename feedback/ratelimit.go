package feedback

import (
	"math"
	"time"
)

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

// parseGoDuration reads a sequence of number+unit pairs in Go syntax
// (h, m, s, ms, us, µs, ns; each number may have a fraction), without a
// sign. It saturates at maxReset instead of overflowing.
func parseGoDuration(b []byte) (time.Duration, bool) {
	var total float64
	for len(b) > 0 {
		i, v := 0, 0.0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + float64(b[i]-'0')
			i++
		}
		digits := i
		if i < len(b) && b[i] == '.' {
			i++
			scale := 0.1
			for i < len(b) && b[i] >= '0' && b[i] <= '9' {
				v += float64(b[i]-'0') * scale
				scale /= 10
				i++
				digits++
			}
		}
		if digits == 0 {
			return 0, false
		}
		unit, n := durationUnit(b[i:])
		if n == 0 {
			return 0, false
		}
		total += v * float64(unit)
		b = b[i+n:]
	}
	if !(total < float64(maxReset)) || math.IsNaN(total) {
		return maxReset, true
	}
	return time.Duration(total), true
}

// durationUnit reads a Go duration unit at the start of b: its length in
// nanoseconds and its length in bytes (0 if none).
func durationUnit(b []byte) (time.Duration, int) {
	switch {
	case len(b) >= 2 && b[0] == 'm' && b[1] == 's':
		return time.Millisecond, 2
	case len(b) >= 2 && (b[0] == 'u' && b[1] == 's'):
		return time.Microsecond, 2
	case len(b) >= 3 && b[0] == 0xc2 && b[1] == 0xb5 && b[2] == 's': // µs
		return time.Microsecond, 3
	case len(b) >= 2 && b[0] == 'n' && b[1] == 's':
		return time.Nanosecond, 2
	case len(b) >= 1 && b[0] == 'h':
		return time.Hour, 1
	case len(b) >= 1 && b[0] == 'm':
		return time.Minute, 1
	case len(b) >= 1 && b[0] == 's':
		return time.Second, 1
	}
	return 0, 0
}

// parseRFC3339 reads YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM) ("t" and
// "z" accepted in lower case, a space accepted for "T") without
// allocating. Field ranges are checked (month 1..12, day 1..31, hour
// 0..23, minute 0..59, second 0..60); time.Date normalises a day past the
// end of its month.
func parseRFC3339(b []byte) (time.Time, bool) {
	if len(b) < len("2006-01-02T15:04:05Z") || b[4] != '-' || b[7] != '-' || b[13] != ':' || b[16] != ':' {
		return time.Time{}, false
	}
	if t := b[10]; t != 'T' && t != 't' && t != ' ' {
		return time.Time{}, false
	}
	year, ok1 := digitsAt(b, 0, 4)
	month, ok2 := digitsAt(b, 5, 2)
	day, ok3 := digitsAt(b, 8, 2)
	hour, ok4 := digitsAt(b, 11, 2)
	minute, ok5 := digitsAt(b, 14, 2)
	sec, ok6 := digitsAt(b, 17, 2)
	if !(ok1 && ok2 && ok3 && ok4 && ok5 && ok6) || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || sec > 60 {
		return time.Time{}, false
	}
	i, nsec := 19, 0
	if i < len(b) && b[i] == '.' {
		i++
		start, scale := i, 100000000
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			nsec += int(b[i]-'0') * scale
			scale /= 10
			i++
		}
		if i == start {
			return time.Time{}, false
		}
	}
	offset := 0
	switch {
	case i+1 == len(b) && (b[i] == 'Z' || b[i] == 'z'):
	case i+6 == len(b) && (b[i] == '+' || b[i] == '-') && b[i+3] == ':':
		oh, okh := digitsAt(b, i+1, 2)
		om, okm := digitsAt(b, i+4, 2)
		if !okh || !okm || oh > 23 || om > 59 {
			return time.Time{}, false
		}
		offset = (oh*60 + om) * 60
		if b[i] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	return t.Add(-time.Duration(offset) * time.Second), true
}

// digitsAt reads n decimal digits at b[i:].
func digitsAt(b []byte, i, n int) (int, bool) {
	v := 0
	for _, c := range b[i : i+n] {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}
