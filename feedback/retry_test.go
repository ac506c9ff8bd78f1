package feedback

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(1994, 11, 6, 8, 49, 30, 0, time.UTC)
	cases := []struct {
		ra, ms string
		want   time.Duration
	}{
		{"", "", 0},
		{"5", "", 5 * time.Second},
		{" 5 ", "", 5 * time.Second},
		{"0", "", 0},
		{"1.5", "", 1500 * time.Millisecond},
		{"5", "250", 250 * time.Millisecond},
		{"5", "0", 0}, // a valid retry-after-ms wins, even 0
		{"5", "12.5", 12500 * time.Microsecond},
		{"5", "junk", 5 * time.Second},
		{"5", "-1", 5 * time.Second},
		{"-5", "", 0},
		{"5s", "", 0},
		{"1.", "", 0},
		{".5", "", 0},
		{"99999999999999999999999", "", math.MaxInt64},
		{"", "99999999999999999999999", math.MaxInt64},
		{"9223372036", "", 9223372036 * time.Second},
		{"9223372037", "", math.MaxInt64},
		{"Sun, 06 Nov 1994 08:49:37 GMT", "", 7 * time.Second},
		{"Sunday, 06-Nov-94 08:49:37 GMT", "", 7 * time.Second},
		{"Sun Nov  6 08:49:37 1994", "", 7 * time.Second},
		{"Sun, 06 Nov 1994 08:49:37 GMT", "100", 100 * time.Millisecond},
		{"Sun, 06 Nov 1994 08:49:20 GMT", "", 0}, // in the past
		{"Sun, 06 Nov 1994 08:49:30 GMT", "", 0}, // now
		{"Sun, 06 Nov 1994 08:49:37 UTC", "", 0},
		{"Sun, 06 Xyz 1994 08:49:37 GMT", "", 0},
		{"Sun, 06 Nov 1994 25:49:37 GMT", "", 0},
		{"Sun, 6 Nov 1994 08:49:37 GMT", "", 0},
		{"Sun, 06 Nov 1994 08:49:37 GMT ", "", 7 * time.Second},
		{"garbage, that is exactly twenty-nine", "", 0},
		// The three HTTP-date forms of RFC 9110 §5.6.7, each with a
		// date other than the RFC's example and with what each rejects.
		{"Mon, 07 Nov 1994 08:49:30 GMT", "", 24 * time.Hour},
		{"Sun, 06 Nov 1994 08:49:37 gmt", "", 0},
		{"Thu, 31 Nov 1994 08:49:37 GMT", "", 0}, // November has 30 days
		{"Sun, 06 Nov 94 08:49:37 GMT", "", 0},   // IMF-fixdate has four-digit years
		{"Wednesday, 09-Nov-94 08:49:30 GMT", "", 72 * time.Hour},
		{"Sunday, 06-Nov-94 08:49:37 PST", "", 0},
		{"Sunday, 06-Nov-1994 08:49:37 GMT", "", 0},
		{"Sun, 06-Nov-94 08:49:37 GMT", "", 0}, // RFC 850 spells the weekday out
		{"Wed Nov 16 08:49:30 1994", "", 10 * 24 * time.Hour},
		{"Sun Nov 6 08:49:37 1994", "", 0}, // asctime pads the day with a space
		{"Sun Nov  6 08:49:37 1994 GMT", "", 0},
	}
	for _, tc := range cases {
		if got := RetryAfter([]byte(tc.ra), []byte(tc.ms), now); got != tc.want {
			t.Errorf("RetryAfter(%q, %q) = %v, want %v", tc.ra, tc.ms, got, tc.want)
		}
	}
}

// TestRetryAfterHTTPDateRoundTrip formats times with the standard library
// in each HTTP-date layout and checks that RetryAfter reads them back.
func TestRetryAfterHTTPDateRoundTrip(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	layouts := []string{http.TimeFormat, "Monday, 02-Jan-06 15:04:05 GMT", time.ANSIC}
	for _, d := range []time.Duration{time.Second, 59 * time.Second, 90 * time.Minute, 23 * time.Hour, 40 * 24 * time.Hour, 9 * 365 * 24 * time.Hour} {
		for _, layout := range layouts {
			v := now.Add(d).Format(layout)
			if got := RetryAfter([]byte(v), nil, now); got != d {
				t.Errorf("RetryAfter(%q) = %v, want %v", v, got, d)
			}
		}
	}
}

// TestRetryAfterRFC850Year checks RFC 9110's rule for two-digit years: the
// year with those digits that is not more than 50 years in the future.
func TestRetryAfterRFC850Year(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		ra   string
		want time.Duration
	}{
		{"Tuesday, 01-Jan-69 00:00:00 GMT", time.Date(2069, 1, 1, 0, 0, 0, 0, time.UTC).Sub(now)},
		{"Friday, 01-Jan-77 00:00:00 GMT", 0}, // 2077 is 51 years ahead: 1977
		{"Thursday, 01-Jan-26 00:00:10 GMT", 10 * time.Second},
		{"Thursday, 01-Jan-25 00:00:10 GMT", 0},
	}
	for _, tc := range cases {
		if got := RetryAfter([]byte(tc.ra), nil, now); got != tc.want {
			t.Errorf("RetryAfter(%q) = %v, want %v", tc.ra, got, tc.want)
		}
	}
}

func TestRetryAfterNoAllocs(t *testing.T) {
	now := time.Date(1994, 11, 6, 8, 49, 30, 0, time.UTC)
	for _, ra := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",
		"Sunday, 06-Nov-94 08:49:37 GMT",
		"Sun Nov  6 08:49:37 1994",
		"120",
		"not a date",
	} {
		ra, ms := []byte(ra), []byte("x")
		if n := testing.AllocsPerRun(100, func() { RetryAfter(ra, ms, now) }); n != 0 {
			t.Errorf("RetryAfter(%q): %v allocs", ra, n)
		}
	}
}

// FuzzRetryAfter checks that no input panics and the result is never
// negative.
func FuzzRetryAfter(f *testing.F) {
	f.Add("5", "")
	f.Add("Sun, 06 Nov 1994 08:49:37 GMT", "")
	f.Add("Sunday, 06-Nov-94 08:49:37 GMT", "1.5")
	f.Add("Sun Nov  6 08:49:37 1994", "")
	now := time.Date(1994, 11, 6, 8, 49, 30, 0, time.UTC)
	f.Fuzz(func(t *testing.T, ra, ms string) {
		if d := RetryAfter([]byte(ra), []byte(ms), now); d < 0 {
			t.Fatalf("negative %v", d)
		}
	})
}
