package sim

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func TestOpenAIStream(t *testing.T) {
	h := start(t, fast(), false)
	for _, tc := range []struct {
		name       string
		body       string
		tokens     int
		usage      bool
		wantFinish string
	}{
		{"plain", `{"model":"gpt-x","stream":true}`, 7, false, "stop"},
		{"usage", `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true}}`, 7, true, "stop"},
		{"length", `{"model":"gpt-x","stream":true,"max_tokens":3}`, 3, false, "length"},
		{"max_completion_tokens", `{"model":"gpt-x","stream":true,"max_completion_tokens":2,"max_tokens":50}`, 2, false, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.mustPost("/v1/chat/completions", tc.body, HeaderOutputTokens, "7", HeaderPromptTokens, "123")
			defer resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			evs, err := readSSE(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if last := evs[len(evs)-1]; last.data != "[DONE]" || last.name != "" {
				t.Fatalf("last event %+v, want data: [DONE]", last)
			}
			evs = evs[:len(evs)-1]
			first := decode(t, evs[0])
			if path(first, "choices", 0, "delta", "role") != "assistant" || path(first, "choices", 0, "delta", "content") != "" {
				t.Errorf("first chunk is not the role chunk: %s", evs[0].data)
			}
			tokens, finish, usageChunks := 0, "", 0
			for i, ev := range evs {
				m := decode(t, ev)
				if m["object"] != "chat.completion.chunk" || m["model"] != "gpt-x" || !strings.HasPrefix(m["id"].(string), "chatcmpl-sim") {
					t.Errorf("chunk %d: bad envelope: %s", i, ev.data)
				}
				if _, has := m["created"].(float64); !has {
					t.Errorf("chunk %d: no created", i)
				}
				u, hasUsage := m["usage"]
				if choices := m["choices"].([]any); len(choices) == 0 {
					usageChunks++
					if i != len(evs)-1 {
						t.Errorf("usage chunk is not last before [DONE]")
					}
					if path(u, "prompt_tokens") != 123.0 || path(u, "completion_tokens") != float64(tc.tokens) ||
						path(u, "total_tokens") != float64(123+tc.tokens) {
						t.Errorf("usage = %v", u)
					}
					continue
				}
				if tc.usage && (!hasUsage || u != nil) {
					t.Errorf("chunk %d: want \"usage\":null with include_usage: %s", i, ev.data)
				}
				if !tc.usage && hasUsage {
					t.Errorf("chunk %d: usage without include_usage: %s", i, ev.data)
				}
				if c, ok := path(m, "choices", 0, "delta", "content").(string); ok && c != "" {
					tokens++
					if c != tokenText {
						t.Errorf("token %q", c)
					}
				}
				if f, ok := path(m, "choices", 0, "finish_reason").(string); ok {
					if finish != "" {
						t.Errorf("two finish chunks")
					}
					finish = f
				}
			}
			if tokens != tc.tokens || finish != tc.wantFinish {
				t.Errorf("tokens %d finish %q, want %d %q", tokens, finish, tc.tokens, tc.wantFinish)
			}
			if want := map[bool]int{true: 1, false: 0}[tc.usage]; usageChunks != want {
				t.Errorf("usage chunks %d, want %d", usageChunks, want)
			}
		})
	}
	st := h.s.Stats()
	if st.Completed != 4 || st.OutputTokens != 7+7+3+2 {
		t.Errorf("stats %+v", st)
	}
}

func TestAnthropicStream(t *testing.T) {
	h := start(t, fast(), false)
	resp := h.mustPost("/v1/messages", `{"model":"claude-x","max_tokens":100,"stream":true,"messages":[]}`,
		HeaderOutputTokens, "5", HeaderPromptTokens, "42")
	defer resp.Body.Close()
	evs, err := readSSE(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	deltas := 0
	for _, ev := range evs {
		m := decode(t, ev)
		if m["type"] != ev.name {
			t.Errorf("event %q carries type %v", ev.name, m["type"])
		}
		if ev.name == "content_block_delta" {
			deltas++
			if path(m, "delta", "type") != "text_delta" || path(m, "delta", "text") != tokenText {
				t.Errorf("delta %s", ev.data)
			}
			continue
		}
		names = append(names, ev.name)
		switch ev.name {
		case "message_start":
			if path(m, "message", "usage", "input_tokens") != 42.0 || path(m, "message", "model") != "claude-x" {
				t.Errorf("message_start %s", ev.data)
			}
		case "message_delta":
			if path(m, "delta", "stop_reason") != "end_turn" || path(m, "usage", "output_tokens") != 5.0 {
				t.Errorf("message_delta %s", ev.data)
			}
		}
	}
	want := "message_start content_block_start ping content_block_stop message_delta message_stop"
	if got := strings.Join(names, " "); got != want || deltas != 5 {
		t.Errorf("events %q with %d deltas, want %q with 5", got, deltas, want)
	}
	if evs[3].name != "content_block_delta" {
		t.Errorf("first delta is event %d (%s), want right after ping", 3, evs[3].name)
	}

	// max_tokens cut.
	resp2 := h.mustPost("/v1/messages", `{"model":"claude-x","max_tokens":2,"stream":true}`, HeaderOutputTokens, "5")
	defer resp2.Body.Close()
	evs, err = readSSE(resp2.Body)
	if err != nil {
		t.Fatal(err)
	}
	md := decode(t, evs[len(evs)-2])
	if path(md, "delta", "stop_reason") != "max_tokens" || path(md, "usage", "output_tokens") != 2.0 {
		t.Errorf("message_delta %v", md)
	}
}

func TestResponsesStream(t *testing.T) {
	h := start(t, fast(), false)
	for _, tc := range []struct {
		body     string
		tokens   int
		terminal string
	}{
		{`{"model":"gpt-r","input":"hi","stream":true}`, 4, "response.completed"},
		{`{"model":"gpt-r","input":"hi","stream":true,"max_output_tokens":3}`, 3, "response.incomplete"},
	} {
		resp := h.mustPost("/v1/responses", tc.body, HeaderOutputTokens, "4", HeaderPromptTokens, "9")
		evs, err := readSSE(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		deltas := 0
		for i, ev := range evs {
			m := decode(t, ev)
			if m["type"] != ev.name || m["sequence_number"] != float64(i) {
				t.Errorf("event %d %q: type %v seq %v", i, ev.name, m["type"], m["sequence_number"])
			}
			if ev.name == "response.output_text.delta" {
				deltas++
			}
		}
		if evs[0].name != "response.created" || evs[len(evs)-1].name != tc.terminal || deltas != tc.tokens {
			t.Errorf("first %q last %q deltas %d", evs[0].name, evs[len(evs)-1].name, deltas)
		}
		u := path(decode(t, evs[len(evs)-1]), "response", "usage")
		if path(u, "input_tokens") != 9.0 || path(u, "output_tokens") != float64(tc.tokens) || path(u, "total_tokens") != float64(9+tc.tokens) {
			t.Errorf("usage %v", u)
		}
	}
}

func TestNonStream(t *testing.T) {
	h := start(t, fast(), false)
	for _, tc := range []struct {
		path, body string
		check      func(m map[string]any) bool
	}{
		{"/v1/chat/completions", `{"model":"m"}`, func(m map[string]any) bool {
			return path(m, "choices", 0, "message", "content") == "tok tok tok " &&
				path(m, "choices", 0, "finish_reason") == "stop" &&
				path(m, "usage", "completion_tokens") == 3.0 && path(m, "usage", "prompt_tokens") == 8.0
		}},
		{"/v1/messages", `{"model":"m","max_tokens":10}`, func(m map[string]any) bool {
			return path(m, "content", 0, "text") == "tok tok tok " && path(m, "stop_reason") == "end_turn" &&
				path(m, "usage", "output_tokens") == 3.0 && path(m, "usage", "input_tokens") == 8.0
		}},
		{"/openai/v1/responses", `{"model":"m"}`, func(m map[string]any) bool {
			return path(m, "status") == "completed" && path(m, "output", 0, "content", 0, "text") == "tok tok tok " &&
				path(m, "usage", "output_tokens") == 3.0
		}},
	} {
		resp := h.mustPost(tc.path, tc.body, HeaderOutputTokens, "3", HeaderPromptTokens, "8")
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: status %d ct %q err %v: %s", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), err, b)
		}
		if !tc.check(m) {
			t.Errorf("%s: body %s", tc.path, b)
		}
	}
	if st := h.s.Stats(); st.Completed != 3 || st.OutputTokens != 9 {
		t.Errorf("stats %+v", st)
	}
}

func TestBadRequests(t *testing.T) {
	h := start(t, fast(), false)
	for _, tc := range []struct {
		path, body string
		hdr        []string
		status     int
	}{
		{"/v1/chat/completions", `{not json`, nil, 400},
		{"/v1/messages", `{"max_tokens":0}`, nil, 400},
		{"/v1/chat/completions", `{}`, []string{HeaderOutputTokens, "-1"}, 400},
		{"/v1/chat/completions", `{}`, []string{HeaderTTFT, "soon"}, 400},
		{"/v1/chat/completions", `{}`, []string{HeaderFail, "explode"}, 400},
		{"/v2/unknown", `{}`, nil, 404},
	} {
		resp := h.mustPost(tc.path, tc.body, tc.hdr...)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !json.Valid(b) {
			t.Errorf("%s %s %v: status %d body %s", tc.path, tc.body, tc.hdr, resp.StatusCode, b)
		}
	}
	// 404 is not a model request; the five others are errors.
	if st := h.s.Stats(); st.Requests != 5 || st.Errors != 5 {
		t.Errorf("stats %+v", st)
	}
}

func TestAdmin(t *testing.T) {
	h := start(t, fast(), false)
	resp := h.mustPost("/sim/capacity?c=3", "")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st Stats
	if err := json.Unmarshal(b, &st); err != nil || st.Capacity != 3 {
		t.Fatalf("capacity: %v %s", err, b)
	}
	resp = h.mustPost("/sim/capacity?schedule=5,1@1h", "")
	resp.Body.Close()
	if c := h.s.Capacity(); c != 5 {
		t.Errorf("capacity %d after schedule, want 5", c)
	}
	r, err := h.client.Get(h.base + "/sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(r.Body)
	r.Body.Close()
	if err := json.Unmarshal(b, &st); err != nil || st.Capacity != 5 {
		t.Errorf("stats: %v %s", err, b)
	}
}
