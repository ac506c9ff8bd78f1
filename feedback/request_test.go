package feedback

import (
	"strings"
	"testing"
)

func TestInspectRequest(t *testing.T) {
	msgs := `[{"role":"user","content":"hello","model":"not-this"}]`
	cases := []struct {
		name string
		body string
		want Request
	}{
		{"openai_chat",
			`{"model":"gpt-4o","messages":` + msgs + `,"stream":true,"max_tokens":256,"stream_options":{"include_usage":true}}`,
			Request{Model: "gpt-4o", Stream: true, MaxTokens: 256, IncludeUsage: true, PromptTokens: ceilDiv4(len(msgs))}},
		{"model_after_messages",
			`{"messages":` + msgs + `,"model":"m2"}`,
			Request{Model: "m2", PromptTokens: ceilDiv4(len(msgs))}},
		{"nested_model_only",
			`{"messages":` + msgs + `,"metadata":{"model":"nope"}}`,
			Request{PromptTokens: ceilDiv4(len(msgs))}},
		{"max_completion_tokens", `{"max_completion_tokens":1000,"model":"o3"}`, Request{Model: "o3", MaxTokens: 1000}},
		{"max_output_tokens", `{"model":"gpt-4.1","input":"hi","max_output_tokens":77}`, Request{Model: "gpt-4.1", MaxTokens: 77, PromptTokens: 1}},
		{"largest_max_wins", `{"max_tokens":10,"max_completion_tokens":30,"max_output_tokens":20}`, Request{MaxTokens: 30}},
		{"duplicate_last_wins", `{"model":"a","model":"b","max_tokens":5,"max_tokens":3,"stream":true,"stream":false}`, Request{Model: "b", MaxTokens: 3}},
		{"negative_and_float", `{"max_tokens":-5,"max_completion_tokens":12.9}`, Request{MaxTokens: 12}},
		{"max_tokens_string", `{"max_tokens":"100"}`, Request{}},
		{"stream_false", `{"stream":false}`, Request{}},
		{"stream_string", `{"stream":"true"}`, Request{}},
		{"stream_truex", `{"stream":truex}`, Request{}},
		{"include_usage_false", `{"stream_options":{"include_usage":false},"stream":true}`, Request{Stream: true}},
		{"stream_options_null", `{"stream_options":null}`, Request{}},
		{"weird_whitespace",
			"\r\n\t {\n\t\"model\"\r\n:\t\"claude-3\" ,\n\"stream\"  :  true ,\"max_tokens\"\t:\n4096 }  ",
			Request{Model: "claude-3", Stream: true, MaxTokens: 4096}},
		{"escaped_model", `{"model":"gpt-4o\u002dmini\/x\"y"}`, Request{Model: `gpt-4o-mini/x"y`}},
		{"escaped_key", `{"m\u006fdel":"k","\u0073tream":true}`, Request{Model: "k", Stream: true}},
		{"model_not_string", `{"model":42}`, Request{}},
		{"model_null_after_string", `{"model":"a","model":null}`, Request{}},
		{"anthropic",
			`{"model":"claude-sonnet-4-5","max_tokens":1024,"system":"be brief","messages":[{"role":"user","content":"hi"}]}`,
			Request{Model: "claude-sonnet-4-5", MaxTokens: 1024, PromptTokens: ceilDiv4(len(`"be brief"`) + len(`[{"role":"user","content":"hi"}]`))}},
		{"prompt_and_tools",
			`{"prompt":"abcd","tools":[1],"instructions":"xy"}`,
			Request{PromptTokens: ceilDiv4(len(`"abcd"`) + len(`[1]`) + len(`"xy"`))}},
		{"truncated_messages", `{"model":"m","messages":[{"content":"abc`, Request{Model: "m", PromptTokens: ceilDiv4(len(`[{"content":"abc`))}},
		{"not_object", `["model","x"]`, Request{PromptTokens: ceilDiv4(len(`["model","x"]`))}},
		{"empty", ``, Request{}},
		{"garbage", `{"model":"a" "stream":true}`, Request{Model: "a"}},
		{"string_with_braces", `{"messages":"}{\"model\":\"x\"}","model":"real"}`, Request{Model: "real", PromptTokens: ceilDiv4(len(`"}{\"model\":\"x\"}"`))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := InspectRequest([]byte(tc.body)); got != tc.want {
				t.Fatalf("\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestInspectRequestLongModel(t *testing.T) {
	long := strings.Repeat("m", 300)
	if got := InspectRequest([]byte(`{"model":"` + long + `"}`)); got.Model != long {
		t.Fatalf("long model: %q", got.Model)
	}
	longEsc := strings.Repeat(`\u0041`, 100)
	if got := InspectRequest([]byte(`{"model":"` + longEsc + `"}`)); got.Model != strings.Repeat("A", 100) {
		t.Fatalf("long escaped model: %q", got.Model)
	}
	longEsc = strings.Repeat(`\u00e9`, 100) // 200 bytes decoded: too long for the intern buffer
	if got := InspectRequest([]byte(`{"model":"` + longEsc + `"}`)); got.Model != strings.Repeat("é", 100) {
		t.Fatalf("long escaped model: %q", got.Model)
	}
}

// TestInspectRequestNoAllocs checks that a repeated model is interned.
func TestInspectRequestNoAllocs(t *testing.T) {
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":100}`)
	InspectRequest(body)
	if n := testing.AllocsPerRun(100, func() { InspectRequest(body) }); n != 0 {
		t.Fatalf("%v allocs per call", n)
	}
	esc := []byte(`{"model":"gpt\u002d4o"}`)
	InspectRequest(esc)
	if n := testing.AllocsPerRun(100, func() { InspectRequest(esc) }); n != 0 {
		t.Fatalf("escaped model: %v allocs per call", n)
	}
}

func TestIntern(t *testing.T) {
	a := intern([]byte("model-a"))
	b := intern([]byte("model-a"))
	if a != b || a != "model-a" {
		t.Fatal("intern mismatch")
	}
	// Filling every slot many times over must keep answers right.
	for i := 0; i < 10*internSlots; i++ {
		s := strings.Repeat("x", i%50) + string(rune('a'+i%26))
		if got := intern([]byte(s)); got != s {
			t.Fatalf("intern(%q) = %q", s, got)
		}
	}
	if intern(nil) != "" {
		t.Fatal("empty")
	}
}
