package feedback

import (
	"math"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
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
	}
	for _, tc := range cases {
		if got := RetryAfter([]byte(tc.ra), []byte(tc.ms), now); got != tc.want {
			t.Errorf("RetryAfter(%q, %q) = %v, want %v", tc.ra, tc.ms, got, tc.want)
		}
	}
}

func TestRetryAfterNoAllocs(t *testing.T) {
	now := time.Date(1994, 11, 6, 8, 49, 30, 0, time.UTC)
	ra, ms := []byte("Sun, 06 Nov 1994 08:49:37 GMT"), []byte("x")
	if n := testing.AllocsPerRun(100, func() { RetryAfter(ra, ms, now) }); n != 0 {
		t.Fatalf("%v allocs", n)
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
