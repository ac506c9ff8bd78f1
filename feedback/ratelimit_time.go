package feedback

import (
	"math"
	"time"
)

// Time values of rate-limit headers: Go-syntax durations (OpenAI) and
// RFC 3339 times (Anthropic), parsed without allocating.

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
