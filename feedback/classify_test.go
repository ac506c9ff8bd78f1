package feedback

import (
	"strings"
	"testing"
)

func TestClassifyErrorFiles(t *testing.T) {
	cases := []struct {
		status int
		file   string
		want   ErrorClass
	}{
		{429, "openai_429_rate_limit.json", ErrRateLimit},
		{429, "openai_429_quota.json", ErrInsufficientQuota},
		{503, "openai_503_slow_down.json", ErrOverloaded},
		{500, "openai_500.json", ErrServer},
		{503, "openai_500.json", ErrUnavailable},
		{529, "anthropic_529.json", ErrOverloaded},
		{503, "anthropic_529.json", ErrOverloaded},
		{500, "anthropic_529.json", ErrOverloaded},
		{429, "anthropic_429.json", ErrRateLimit},
		{400, "anthropic_400.json", ErrInvalidRequest},
		{400, "vllm_400.json", ErrInvalidRequest},
		{200, "vllm_400.json", ErrInvalidRequest},
		{503, "nginx_503.html", ErrUnavailable},
		{502, "nginx_503.html", ErrServer},
		{503, "overloaded_503.txt", ErrOverloaded},
		{200, "anthropic_529.json", ErrOverloaded},
	}
	for _, tc := range cases {
		body := readTestdata(t, "errors/"+tc.file)
		if got := ClassifyError(tc.status, body); got != tc.want {
			t.Errorf("%d %s: got %v, want %v", tc.status, tc.file, got, tc.want)
		}
	}
}

func TestClassifyError(t *testing.T) {
	cases := []struct {
		status int
		body   string
		want   ErrorClass
	}{
		// Status alone.
		{200, "", ErrNone},
		{204, "", ErrNone},
		{0, "", ErrNone},
		{400, "", ErrInvalidRequest},
		{413, "", ErrInvalidRequest},
		{422, "not json", ErrInvalidRequest},
		{401, "", ErrAuth},
		{403, "", ErrAuth},
		{404, "", ErrNotFound},
		{429, "", ErrRateLimit},
		{429, "Too Many Requests", ErrRateLimit},
		{529, "", ErrOverloaded},
		{503, "", ErrUnavailable},
		{503, "Service Unavailable", ErrUnavailable},
		{503, "please SLOW DOWN", ErrOverloaded},
		{500, "", ErrServer},
		{502, "<html>bad gateway</html>", ErrServer},
		{504, "", ErrServer},
		{599, "", ErrServer},
		{408, "", ErrOther},
		{409, `{"error":{"type":"weird"}}`, ErrOther},
		{402, `{"error":{"code":"insufficient_quota"}}`, ErrInsufficientQuota},
		{302, "", ErrOther},
		{100, "", ErrOther},
		{-1, "", ErrOther},
		// The status decides where it is unambiguous.
		{400, `{"error":{"code":"rate_limit_exceeded"}}`, ErrInvalidRequest},
		{401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`, ErrAuth},
		{403, `{"type":"error","error":{"type":"permission_error","message":"no"}}`, ErrAuth},
		{404, `{"type":"error","error":{"type":"not_found_error","message":"model: x"}}`, ErrNotFound},
		{413, `{"type":"error","error":{"type":"request_too_large","message":"too big"}}`, ErrInvalidRequest},
		{500, `{"type":"error","error":{"type":"api_error","message":"Internal server error"}}`, ErrServer},
		// 429 bodies.
		{429, `{"error":{"message":"quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, ErrInsufficientQuota},
		{429, `{"error":{"message":"x","type":"requests","code":"rate_limit_exceeded"}}`, ErrRateLimit},
		{429, `{"error":{"message":"x","type":"insufficient_quota","code":null}}`, ErrInsufficientQuota},
		{429, `{"error":{"type":"insufficient_\u0071uota"}}`, ErrInsufficientQuota},
		{429, `{"error":{"message":"You exceeded your current quota"}}`, ErrRateLimit},
		{429, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, ErrOverloaded},
		// 503 wording.
		{503, `{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error"}}`, ErrOverloaded},
		{503, `{"error":{"message":"Service unavailable","type":"server_error"}}`, ErrUnavailable},
		{503, `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`, ErrUnavailable},
		{503, `{"error":"server overloaded"}`, ErrOverloaded},
		{503, `{"detail":"slow down"}`, ErrOverloaded}, // no error object: the whole body is searched
		// 2xx bodies carrying an error object.
		{200, `{"error":{"type":"overloaded_error"}}`, ErrOverloaded},
		{200, `{"error":null,"choices":[]}`, ErrNone},
		{200, `{"type":"message","content":[]}`, ErrNone},
		{200, `{"type":"error","code":"rate_limit_exceeded","message":"x"}`, ErrRateLimit},
		{200, `{"type":"error","message":"Overloaded"}`, ErrOverloaded},
		{200, `{"object":"error","message":"boom"}`, ErrOther},
		{0, `{"error":{"type":"api_error"}}`, ErrServer},
		// Garbage.
		{429, `{"error":{"type":`, ErrRateLimit},
		{503, "\xff\xfe{{{", ErrUnavailable},
		{200, `[1,2,3]`, ErrNone},
	}
	for _, tc := range cases {
		if got := ClassifyError(tc.status, []byte(tc.body)); got != tc.want {
			t.Errorf("ClassifyError(%d, %q) = %v, want %v", tc.status, tc.body, got, tc.want)
		}
	}
}

func TestClassifyErrorNoAllocs(t *testing.T) {
	body := readTestdata(t, "errors/openai_429_quota.json")
	if n := testing.AllocsPerRun(100, func() { ClassifyError(429, body) }); n != 0 {
		t.Fatalf("%v allocs", n)
	}
}

func TestStrings(t *testing.T) {
	classes := map[ErrorClass]string{
		ErrNone: "", ErrRateLimit: "rate_limit", ErrOverloaded: "overloaded",
		ErrInsufficientQuota: "insufficient_quota", ErrInvalidRequest: "invalid_request",
		ErrAuth: "auth", ErrNotFound: "not_found", ErrServer: "server", ErrUnavailable: "unavailable",
		ErrTimeout: "timeout", ErrOther: "other", 200: "other",
	}
	for c, want := range classes {
		if got := c.String(); got != want {
			t.Errorf("ErrorClass(%d).String() = %q, want %q", c, got, want)
		}
	}
	dialects := map[Dialect]string{0: "unknown", OpenAIChat: "openai_chat", OpenAIResponses: "openai_responses", Anthropic: "anthropic", 9: "unknown"}
	for d, want := range dialects {
		if got := d.String(); got != want {
			t.Errorf("Dialect(%d).String() = %q, want %q", d, got, want)
		}
	}
}

func TestDialectForPath(t *testing.T) {
	cases := map[string]Dialect{
		"":                                    OpenAIChat,
		"/v1/chat/completions":                OpenAIChat,
		"/v1/completions":                     OpenAIChat,
		"/v1/messages":                        Anthropic,
		"/anthropic/v1/messages":              Anthropic,
		"/v1/messages/count_tokens":           Anthropic,
		"/v1/messages?beta=true":              Anthropic,
		"/v1/messagesx":                       OpenAIChat,
		"/v1/messagesx/v1/messages":           Anthropic,
		"/v1/responses":                       OpenAIResponses,
		"/openai/v1/responses":                OpenAIResponses,
		"/v1/responses/resp_123":              OpenAIResponses,
		"/v1/chat/completions?x=/v1/messages": OpenAIChat,
		"/V1/MESSAGES":                        OpenAIChat,
	}
	for p, want := range cases {
		if got := DialectForPath([]byte(p)); got != want {
			t.Errorf("DialectForPath(%q) = %v, want %v", p, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { DialectForPath([]byte("/anthropic/v1/messages")) }); n != 0 {
		t.Errorf("DialectForPath allocates %v", n)
	}
}

func TestContainsFold(t *testing.T) {
	for _, tc := range []struct {
		s, w string
		want bool
	}{
		{"OverLoaded", "overloaded", true},
		{"overloade", "overloaded", false},
		{"xx slow DOWN", "slow down", true},
		{"", "x", false},
		{"abc", "", true},
		{strings.Repeat("o", 100) + "verloaded", "overloaded", true},
	} {
		if got := containsFold([]byte(tc.s), tc.w); got != tc.want {
			t.Errorf("containsFold(%q, %q) = %v", tc.s, tc.w, got)
		}
	}
}

// TestErrorClassesExhaustive fails when an ErrorClass is added without its
// own name in String (every class but ErrNone and ErrOther would
// otherwise read "other").
func TestErrorClassesExhaustive(t *testing.T) {
	seen := map[string]ErrorClass{}
	for c := range NumErrorClasses {
		name := c.String()
		if (name == "" && c != ErrNone) || (name == "other" && c != ErrOther) {
			t.Errorf("ErrorClass %d has no name of its own in String", c)
		}
		if prev, dup := seen[name]; dup {
			t.Errorf("ErrorClass %d and %d are both %q", prev, c, name)
		}
		seen[name] = c
	}
}
