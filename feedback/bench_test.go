package feedback

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// benchTokens are realistic short token strings, some needing escapes.
var benchTokens = []string{"The", " quick", " brown", " fox", ",", " jumps", " over", " the", " lazy", " dog", ".", "\\n", " \\\"Hello\\\"", " world", "!", " 42"}

// benchStream builds a realistic stream of n output deltas for a dialect.
func benchStream(d Dialect, n int) []byte {
	var b strings.Builder
	switch d {
	case OpenAIChat:
		head := `data: {"id":"chatcmpl-9xYzAbCdEfGhIjKlMnOpQrStUvW","object":"chat.completion.chunk","created":1730000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":`
		fmt.Fprintf(&b, "%s{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", head)
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "%s{\"content\":\"%s\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", head, benchTokens[i%len(benchTokens)])
		}
		fmt.Fprintf(&b, "%s{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n", head)
		b.WriteString(`data: {"id":"chatcmpl-9xYzAbCdEfGhIjKlMnOpQrStUvW","object":"chat.completion.chunk","created":1730000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[],"usage":{"prompt_tokens":1234,"completion_tokens":` + fmt.Sprint(n) + `,"total_tokens":1500,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}` + "\n\n")
		b.WriteString("data: [DONE]\n\n")
	case OpenAIResponses:
		b.WriteString("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_67ccd2bed1ec8190b14f964abc054267\",\"object\":\"response\",\"created_at\":1741476542,\"status\":\"in_progress\",\"error\":null,\"model\":\"gpt-4.1-2025-04-14\",\"output\":[],\"usage\":null}}\n\n")
		b.WriteString("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"sequence_number\":1,\"output_index\":0,\"item\":{\"id\":\"msg_67ccd2bf17f0819081ff3bb2cf6508e6\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}\n\n")
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":%d,\"item_id\":\"msg_67ccd2bf17f0819081ff3bb2cf6508e6\",\"output_index\":0,\"content_index\":0,\"delta\":\"%s\",\"logprobs\":[]}\n\n", i+2, benchTokens[i%len(benchTokens)])
		}
		b.WriteString("event: response.output_text.done\ndata: {\"type\":\"response.output_text.done\",\"sequence_number\":9998,\"item_id\":\"msg_67ccd2bf17f0819081ff3bb2cf6508e6\",\"output_index\":0,\"content_index\":0,\"text\":\"...\"}\n\n")
		fmt.Fprintf(&b, "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":9999,\"response\":{\"id\":\"resp_67ccd2bed1ec8190b14f964abc054267\",\"object\":\"response\",\"status\":\"completed\",\"error\":null,\"output\":[{\"id\":\"msg_67ccd2bf17f0819081ff3bb2cf6508e6\",\"type\":\"message\",\"status\":\"completed\",\"content\":[{\"type\":\"output_text\",\"text\":\"...\",\"annotations\":[]}],\"role\":\"assistant\"}],\"usage\":{\"input_tokens\":328,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":%d,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":600}}}\n\n", n)
	case Anthropic:
		b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":2}}}\n\n")
		b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
		for i := 0; i < n; i++ {
			if i%64 == 0 {
				b.WriteString("event: ping\ndata: {\"type\": \"ping\"}\n\n")
			}
			fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"%s\"}}\n\n", benchTokens[i%len(benchTokens)])
		}
		b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
		fmt.Fprintf(&b, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":%d}}\n\n", n)
		b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}
	return []byte(b.String())
}

func TestBenchStreams(t *testing.T) {
	for _, d := range []Dialect{OpenAIChat, OpenAIResponses, Anthropic} {
		r := meterChunks(d, t0, benchStream(d, 256))
		if r.Deltas != 256 || r.OutputTokens != 256 || !r.Done || !r.TokensFromUsage {
			t.Errorf("%v: %+v", d, r)
		}
	}
}

func BenchmarkMeter(b *testing.B) {
	for _, d := range []Dialect{OpenAIChat, OpenAIResponses, Anthropic} {
		stream := benchStream(d, 256)
		for _, mode := range []string{"4k", "event"} {
			var pieces [][]byte
			if mode == "4k" {
				pieces = chunk(stream, 4096)
			} else {
				pieces = splitEvents(stream)
			}
			b.Run(d.String()+"/"+mode, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(stream)))
				var m Meter
				for b.Loop() {
					m.Reset(d, t0)
					now := t0
					for _, p := range pieces {
						now = now.Add(time.Millisecond)
						m.Write(p, now)
					}
					m.Close(now)
				}
				if r := m.Result(); r.Deltas != 256 {
					b.Fatalf("%+v", r)
				}
			})
		}
	}
}

func BenchmarkMeterJSON(b *testing.B) {
	body := readTestdata(b, "openai_chat.json")
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	var m Meter
	for b.Loop() {
		m.Reset(OpenAIChat, t0)
		m.MeterJSON(body, t0)
	}
}

func BenchmarkInspectRequest(b *testing.B) {
	var msgs []string
	for i := 0; i < 8; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"Question %d: %s"}`, i, strings.Repeat("lorem ipsum dolor sit amet \\\"quoted\\\" ", 8)))
	}
	body := []byte(`{"model":"gpt-4o-mini","messages":[` + strings.Join(msgs, ",") + `],"temperature":0.7,"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":512,"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]}`)
	if r := InspectRequest(body); r.Model != "gpt-4o-mini" || !r.Stream || r.MaxTokens != 512 || !r.IncludeUsage {
		b.Fatalf("%+v", r)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		InspectRequest(body)
	}
}

func BenchmarkClassifyError(b *testing.B) {
	for _, name := range []string{"openai_429_rate_limit.json", "anthropic_529.json", "nginx_503.html"} {
		body := readTestdata(b, "errors/"+name)
		status := map[string]int{"openai_429_rate_limit.json": 429, "anthropic_529.json": 529, "nginx_503.html": 503}[name]
		b.Run(strings.TrimSuffix(name, ".json"), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				ClassifyError(status, body)
			}
		})
	}
}

func BenchmarkRetryAfter(b *testing.B) {
	now := time.Date(1994, 11, 6, 8, 49, 30, 0, time.UTC)
	for _, bc := range []struct{ name, ra string }{
		{"imf-fixdate", "Sun, 06 Nov 1994 08:49:37 GMT"},
		{"rfc850", "Sunday, 06-Nov-94 08:49:37 GMT"},
		{"asctime", "Sun Nov  6 08:49:37 1994"},
		{"seconds", "7"},
	} {
		ra := []byte(bc.ra)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				RetryAfter(ra, nil, now)
			}
		})
	}
}
