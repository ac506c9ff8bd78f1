package feedback_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/feedback"
)

// A proxy meters a stream as it forwards it: TTFT at the first token,
// usage, the finish reason and any error at the end.
func ExampleMeter() {
	sent := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	reads := []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	}
	var m feedback.Meter
	m.Reset(feedback.DialectForPath([]byte("/anthropic/v1/messages")), sent)
	for i, p := range reads {
		now := sent.Add(time.Duration(i+1) * 100 * time.Millisecond)
		sig := m.Write([]byte(p), now)
		if sig&feedback.SigFirstToken != 0 {
			fmt.Println("first token after", m.Result().TTFT)
		}
	}
	m.Close(sent.Add(time.Second))
	r := m.Result()
	fmt.Println(r.OutputTokens, r.InputTokens, r.FinishReason, r.Done)
	fmt.Printf("error class %q\n", r.ErrorClass)
	// Output:
	// first token after 200ms
	// 2 12 end_turn true
	// error class ""
}

func ExampleClassifyError() {
	body := []byte(`{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`)
	c := feedback.ClassifyError(429, body)
	fmt.Println(c)
	c = feedback.ClassifyError(529, []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	fmt.Println(c)
	// Output:
	// insufficient_quota
	// overloaded
}

func ExampleInspectRequest() {
	r := feedback.InspectRequest([]byte(`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":300,"messages":[{"role":"user","content":"Hello there"}]}`))
	fmt.Printf("%s stream=%v usage=%v max=%d prompt~%d\n", r.Model, r.Stream, r.IncludeUsage, r.MaxTokens, r.PromptTokens)
	// Output: gpt-4o stream=true usage=true max=300 prompt~11
}

func ExampleRetryAfter() {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	fmt.Println(feedback.RetryAfter([]byte("7"), []byte("1500"), now))
	fmt.Println(feedback.RetryAfter([]byte("Wed, 01 Jan 2025 00:00:30 GMT"), nil, now))
	// Output:
	// 1.5s
	// 30s
}
