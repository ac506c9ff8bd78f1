package feedback

import (
	"testing"
	"time"
)

// TestDialectSpecsComplete fails when a registered dialect lacks part of
// its description: every dialect names every ErrorType, renders error
// bodies, meters streams and says how its rate-limit headers and API key
// look; names are unique and each family has exactly one default.
func TestDialectSpecsComplete(t *testing.T) {
	names := map[string]bool{}
	defaults := map[string]int{}
	for _, d := range Dialects() {
		s := d.Spec()
		if s.Name == "" || s.Family == "" || s.Meter == nil || s.ErrorBody == nil || s.RateLimitPrefix == "" || s.AuthHeader == "" {
			t.Errorf("%d: incomplete description %+v", d, s)
		}
		for e := range NumErrorTypes {
			if s.ErrorTypes[e] == "" {
				t.Errorf("%v: no name for ErrorType %d", d, e)
			}
		}
		if names[s.Name] {
			t.Errorf("two dialects named %q", s.Name)
		}
		names[s.Name] = true
		if s.Default {
			defaults[s.Family]++
		}
		if len(s.Paths) == 0 && !s.Default {
			t.Errorf("%v: neither paths nor the default of its family: no request can select it", d)
		}
		if got := string(s.ErrorBody("m", "t", "c")); got == "" || got[0] != '{' {
			t.Errorf("%v: error body %q is not a JSON object", d, got)
		}
	}
	for _, d := range Dialects() {
		if f := d.Spec().Family; defaults[f] != 1 {
			t.Errorf("family %q has %d defaults, want 1", f, defaults[f])
		}
	}
	if defaults["openai"] != 1 {
		t.Error("no default for dialect: auto (the openai family's)")
	}
}

// TestDetectDialect: one detector for every provider's dialect: setting.
func TestDetectDialect(t *testing.T) {
	cases := []struct {
		family, path string
		want         Dialect
	}{
		{"auto", "/v1/messages", Anthropic},
		{"", "/v1/responses", OpenAIResponses},
		{"auto", "/v1/chat/completions", OpenAIChat},
		{"openai", "/v1/messages", OpenAIChat},
		{"openai", "/v1/responses?x=1", OpenAIResponses},
		{"openai", "/v1/chat/completions", OpenAIChat},
		{"anthropic", "/v1/chat/completions", Anthropic},
		{"anthropic", "/v1/responses", Anthropic},
		{"anthropic", "/v1/messages", Anthropic},
	}
	for _, c := range cases {
		if got := DetectDialect(c.family, []byte(c.path)); got != c.want {
			t.Errorf("DetectDialect(%q, %q) = %v, want %v", c.family, c.path, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { DetectDialect("openai", []byte("/v1/responses")) }); n != 0 {
		t.Errorf("%v allocs", n)
	}
}

// TestRateLimitHeaderPrefixes: IsRateLimitHeader knows exactly the
// prefixes RateLimits.Header parses.
func TestRateLimitHeaderPrefixes(t *testing.T) {
	for _, d := range Dialects() {
		p := d.Spec().RateLimitPrefix
		var r RateLimits
		name := p + "requests-limit"
		if p == openAIPrefix {
			name = p + "limit-requests"
		}
		if !IsRateLimitHeader([]byte(name)) || !r.Header([]byte(name), []byte("5"), time.Unix(1e9, 0)) {
			t.Errorf("%v: %s not read", d, name)
		}
	}
}
