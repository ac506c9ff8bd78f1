package settings

import (
	"fmt"
	"strings"
	"time"
)

// Problem is one invalid setting. Key is the YAML key inside the block
// ("backoff", "classes[1].max_share", "per_client.max_keys"); Msg says what
// is wrong ("must be at least 0.5 and less than 1, got 1").
type Problem struct {
	Key string
	Msg string
}

func (p Problem) String() string { return p.Key + ": " + p.Msg }

// problems collects the Problems of one block.
type problems []Problem

func (ps *problems) bad(key, format string, a ...any) {
	*ps = append(*ps, Problem{Key: key, Msg: fmt.Sprintf(format, a...)})
}

// durIn reports d outside [lo, hi].
func (ps *problems) durIn(key string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		ps.bad(key, "must be between %s and %s, got %s", FormatDuration(lo), FormatDuration(hi), FormatDuration(d))
	}
}

// FormatDuration prints a duration without trailing zero units: 5m, 1h,
// 1m30s. Every range message of a Sluice config uses it.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// IsToken reports whether s is an RFC 9110 token (what a header name is).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
