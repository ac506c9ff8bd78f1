package feedback

import (
	"math"
	"net/http"
	"time"
)

// RetryAfter returns how long the provider asked callers to wait.
// retryAfterMs (the retry-after-ms header: milliseconds, a fraction
// allowed) takes precedence when it is valid; otherwise retryAfter (the
// retry-after header: delay-seconds, a fraction tolerated, or an HTTP-date
// in IMF-fixdate, RFC 850 or asctime form, taken relative to now). It
// returns 0 when both are absent or invalid, or the date is not after now.
// Surrounding spaces and tabs are ignored; negative numbers are invalid;
// huge values saturate instead of overflowing. It does not allocate, except
// for a value that has the length and comma of an HTTP-date but is not one
// (time.Parse allocates its error).
func RetryAfter(retryAfter, retryAfterMs []byte, now time.Time) time.Duration {
	if d, ok := parseDelay(trimSP(retryAfterMs), time.Millisecond); ok {
		return d
	}
	v := trimSP(retryAfter)
	if d, ok := parseDelay(v, time.Second); ok {
		return d
	}
	if t, ok := parseHTTPDate(v, now); ok {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

func trimSP(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// parseDelay parses digits[.digits] as a count of unit.
func parseDelay(b []byte, unit time.Duration) (time.Duration, bool) {
	i, whole := 0, int64(0)
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if whole < math.MaxInt64/10 {
			whole = whole*10 + int64(b[i]-'0')
		}
		i++
	}
	if i == 0 {
		return 0, false
	}
	var frac time.Duration
	if i < len(b) && b[i] == '.' {
		i++
		start, f, scale := i, int64(0), int64(1)
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			if scale < 1e9 {
				f = f*10 + int64(b[i]-'0')
				scale *= 10
			}
			i++
		}
		if i == start {
			return 0, false
		}
		frac = time.Duration(f * int64(unit) / scale)
	}
	if i != len(b) {
		return 0, false
	}
	if whole > int64(math.MaxInt64/unit) {
		return math.MaxInt64, true
	}
	d := time.Duration(whole) * unit
	if d > math.MaxInt64-frac {
		return math.MaxInt64, true
	}
	return d + frac, true
}

// The three HTTP-date layouts of RFC 9110 §5.6.7. The zone is the literal
// "GMT" that the RFC requires (time.RFC850's MST would accept any zone
// abbreviation and allocate a Location for it).
const (
	imfFixdate = http.TimeFormat                  // Sun, 06 Nov 1994 08:49:37 GMT
	rfc850Date = "Monday, 02-Jan-06 15:04:05 GMT" // Sunday, 06-Nov-94 08:49:37 GMT
	asctime    = time.ANSIC                       // Sun Nov  6 08:49:37 1994
)

// parseHTTPDate parses an HTTP-date in any of its three forms. It picks the
// one layout the value's length and comma allow before calling time.Parse,
// so a valid date is parsed once and without allocating (a failed
// time.Parse allocates its error, so trying the layouts in turn, as
// http.ParseTime does, allocates for the RFC 850 and asctime forms). As
// time.Parse does, it checks the weekday's spelling but not that it matches
// the date. An RFC 850 two-digit year is read as RFC 9110 requires: the
// year with those last two digits that is not more than 50 years after now.
func parseHTTPDate(b []byte, now time.Time) (time.Time, bool) {
	comma := -1
	for i, c := range b {
		if c == ',' {
			comma = i
			break
		}
	}
	var layout string
	switch {
	case comma == 3 && len(b) == len(imfFixdate):
		layout = imfFixdate
	case comma >= len("Monday") && comma <= len("Wednesday") && len(b)-comma == len(rfc850Date)-len("Monday"):
		layout = rfc850Date
	case comma < 0 && len(b) == len(asctime):
		layout = asctime
	default:
		return time.Time{}, false
	}
	t, err := time.Parse(layout, string(b))
	if err != nil {
		return time.Time{}, false
	}
	if layout == rfc850Date {
		y := now.Year() - now.Year()%100 + t.Year()%100
		if y > now.Year()+50 {
			y -= 100
		}
		t = t.AddDate(y-t.Year(), 0, 0)
	}
	return t, true
}
