package feedback

import (
	"math"
	"time"
)

// RetryAfter returns how long the provider asked callers to wait.
// retryAfterMs (the retry-after-ms header: milliseconds, a fraction
// allowed) takes precedence when it is valid; otherwise retryAfter (the
// retry-after header: delay-seconds, a fraction tolerated, or an HTTP-date
// in IMF-fixdate, RFC 850 or asctime form, taken relative to now). It
// returns 0 when both are absent or invalid, or the date is not after now.
// Surrounding spaces and tabs are ignored; negative numbers are invalid;
// huge values saturate instead of overflowing. It does not allocate.
func RetryAfter(retryAfter, retryAfterMs []byte, now time.Time) time.Duration {
	if d, ok := parseDelay(trimSP(retryAfterMs), time.Millisecond); ok {
		return d
	}
	v := trimSP(retryAfter)
	if d, ok := parseDelay(v, time.Second); ok {
		return d
	}
	if t, ok := parseHTTPDate(v); ok {
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

// parseHTTPDate parses the three HTTP-date forms of RFC 9110 §5.6.7:
//
//	Sun, 06 Nov 1994 08:49:37 GMT   (IMF-fixdate)
//	Sunday, 06-Nov-94 08:49:37 GMT  (RFC 850; two-digit years < 70 are 20xx)
//	Sun Nov  6 08:49:37 1994        (asctime)
//
// The weekday is not checked against the date.
func parseHTTPDate(b []byte) (time.Time, bool) {
	comma := -1
	for i, c := range b {
		if c == ',' {
			comma = i
			break
		}
	}
	var day, mon, year, hh, mm, ss int
	var ok bool
	switch {
	case comma == 3 && len(b) == 29: // IMF-fixdate
		r := b[4:]
		if r[0] != ' ' || r[3] != ' ' || r[7] != ' ' || r[12] != ' ' || string(r[21:]) != " GMT" {
			return time.Time{}, false
		}
		day, ok = num(r[1:3])
		if !ok {
			return time.Time{}, false
		}
		if mon = month(r[4:7]); mon == 0 {
			return time.Time{}, false
		}
		if year, ok = num(r[8:12]); !ok {
			return time.Time{}, false
		}
		if hh, mm, ss, ok = clock(r[13:21]); !ok {
			return time.Time{}, false
		}
	case comma > 3 && len(b)-comma == 24: // RFC 850
		r := b[comma+1:]
		if r[0] != ' ' || r[3] != '-' || r[7] != '-' || r[10] != ' ' || string(r[19:]) != " GMT" {
			return time.Time{}, false
		}
		if day, ok = num(r[1:3]); !ok {
			return time.Time{}, false
		}
		if mon = month(r[4:7]); mon == 0 {
			return time.Time{}, false
		}
		if year, ok = num(r[8:10]); !ok {
			return time.Time{}, false
		}
		if year < 70 {
			year += 2000
		} else {
			year += 1900
		}
		if hh, mm, ss, ok = clock(r[11:19]); !ok {
			return time.Time{}, false
		}
	case comma < 0 && len(b) == 24: // asctime
		if b[3] != ' ' || b[7] != ' ' || b[10] != ' ' || b[19] != ' ' {
			return time.Time{}, false
		}
		if mon = month(b[4:7]); mon == 0 {
			return time.Time{}, false
		}
		d := b[8:10]
		if d[0] == ' ' {
			d = d[1:]
		}
		if day, ok = num(d); !ok {
			return time.Time{}, false
		}
		if hh, mm, ss, ok = clock(b[11:19]); !ok {
			return time.Time{}, false
		}
		if year, ok = num(b[20:24]); !ok {
			return time.Time{}, false
		}
	default:
		return time.Time{}, false
	}
	if day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60 {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(mon), day, hh, mm, ss, 0, time.UTC), true
}

func num(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

func clock(b []byte) (hh, mm, ss int, ok bool) {
	if len(b) != 8 || b[2] != ':' || b[5] != ':' {
		return 0, 0, 0, false
	}
	var ok1, ok2, ok3 bool
	hh, ok1 = num(b[0:2])
	mm, ok2 = num(b[3:5])
	ss, ok3 = num(b[6:8])
	return hh, mm, ss, ok1 && ok2 && ok3
}

// month returns 1..12 for a three-letter English month, 0 otherwise.
func month(b []byte) int {
	switch string(b) {
	case "Jan":
		return 1
	case "Feb":
		return 2
	case "Mar":
		return 3
	case "Apr":
		return 4
	case "May":
		return 5
	case "Jun":
		return 6
	case "Jul":
		return 7
	case "Aug":
		return 8
	case "Sep":
		return 9
	case "Oct":
		return 10
	case "Nov":
		return 11
	case "Dec":
		return 12
	}
	return 0
}
