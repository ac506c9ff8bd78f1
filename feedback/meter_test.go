package feedback

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

const step = 10 * time.Millisecond

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// splitEvents cuts an LF stream after each blank line, so that each piece
// holds one event (or comment block) with its terminator.
func splitEvents(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			return append(out, b)
		}
		out = append(out, b[:i+2])
		b = b[i+2:]
	}
	return out
}

// meterEvents feeds one event per Write, the i-th at t0+(i+1)*step, then
// closes the stream at the next step.
func meterEvents(d Dialect, stream []byte) (Result, []Signal) {
	var m Meter
	m.Reset(d, t0)
	var sigs []Signal
	evs := splitEvents(stream)
	for i, e := range evs {
		sigs = append(sigs, m.Write(e, t0.Add(time.Duration(i+1)*step)))
	}
	sigs = append(sigs, m.Close(t0.Add(time.Duration(len(evs)+1)*step)))
	return m.Result(), sigs
}

// meterChunks feeds the stream in the given pieces, all at time now.
func meterChunks(d Dialect, now time.Time, chunks ...[]byte) Result {
	var m Meter
	m.Reset(d, t0)
	for _, c := range chunks {
		m.Write(c, now)
	}
	m.Close(now)
	return m.Result()
}

type golden struct {
	file    string
	dialect Dialect
	want    Result
	// firstAt is the index of the event (one per write) whose Write must
	// return SigFirstToken; -1 for none.
	firstAt int
}

func goldens() []golden {
	return []golden{
		{"openai_chat_stream.sse", OpenAIChat, Result{
			FirstToken: true, TTFT: 2 * step, OutputTokens: 5, Deltas: 5,
			DecodeTime: 4 * step, TokenRate: 100, FinishReason: "stop", Done: true, Events: 8,
		}, 1},
		{"openai_chat_usage.sse", OpenAIChat, Result{
			FirstToken: true, TTFT: 2 * step, OutputTokens: 6, TokensFromUsage: true, InputTokens: 19,
			Deltas: 4, DecodeTime: 3 * step, TokenRate: 100, FinishReason: "length", Done: true, Events: 8,
		}, 1},
		{"openai_chat_tool_calls.sse", OpenAIChat, Result{
			FirstToken: true, TTFT: 2 * step, OutputTokens: 4, Deltas: 4,
			DecodeTime: 3 * step, TokenRate: 100, FinishReason: "tool_calls", Done: true, Events: 7,
		}, 1},
		// The comment blocks are pieces of their own, so event i is
		// written at step i+1 counting them.
		{"openai_chat_reasoning.sse", OpenAIChat, Result{
			FirstToken: true, TTFT: 3 * step, OutputTokens: 28, TokensFromUsage: true, InputTokens: 12,
			Deltas: 4, DecodeTime: 4 * step, TokenRate: 75, FinishReason: "stop", Done: true, Events: 7,
		}, 2},
		{"openai_chat_error_midstream.sse", OpenAIChat, Result{
			FirstToken: true, TTFT: 1 * step, OutputTokens: 2, Deltas: 2,
			DecodeTime: 1 * step, TokenRate: 100, ErrorClass: ErrOverloaded, Events: 3,
		}, 0},
		{"openai_responses_stream.sse", OpenAIResponses, Result{
			FirstToken: true, TTFT: 4 * step, OutputTokens: 11, TokensFromUsage: true, InputTokens: 37,
			Deltas: 6, DecodeTime: 11 * step, TokenRate: 5 / 0.11, FinishReason: "completed", Done: true, Events: 17,
		}, 3},
		{"openai_responses_nofield.sse", OpenAIResponses, Result{
			FirstToken: true, TTFT: 2 * step, OutputTokens: 16, TokensFromUsage: true, InputTokens: 5,
			Deltas: 2, DecodeTime: step, TokenRate: 100, FinishReason: "incomplete", Done: true, Events: 4,
		}, 1},
		{"openai_responses_failed.sse", OpenAIResponses, Result{
			FirstToken: true, TTFT: 2 * step, OutputTokens: 1, Deltas: 1,
			FinishReason: "failed", ErrorClass: ErrRateLimit, Done: true, Events: 3,
		}, 1},
		{"openai_responses_error_event.sse", OpenAIResponses, Result{
			ErrorClass: ErrOverloaded, Events: 2,
		}, -1},
		{"anthropic_stream.sse", Anthropic, Result{
			FirstToken: true, TTFT: 4 * step, OutputTokens: 42, TokensFromUsage: true, InputTokens: 25,
			Deltas: 4, DecodeTime: 5 * step, TokenRate: 60, FinishReason: "tool_use", Done: true, Events: 13,
		}, 3},
		{"anthropic_thinking.sse", Anthropic, Result{
			FirstToken: true, TTFT: 3 * step, OutputTokens: 57, TokensFromUsage: true, InputTokens: 100,
			Deltas: 3, DecodeTime: 5 * step, TokenRate: 40, FinishReason: "max_tokens", Done: true, Events: 12,
		}, 2},
		{"anthropic_error_midstream.sse", Anthropic, Result{
			FirstToken: true, TTFT: 3 * step, OutputTokens: 2, InputTokens: 9, Deltas: 2,
			DecodeTime: step, TokenRate: 100, ErrorClass: ErrOverloaded, Events: 5,
		}, 2},
	}
}

func approxEqual(a, b float64) bool {
	d := a - b
	return d < 1e-9*max(1, a, b) && -d < 1e-9*max(1, a, b)
}

// sameResult compares results, with a tolerance on the float.
func sameResult(got, want Result) bool {
	if !approxEqual(got.TokenRate, want.TokenRate) {
		return false
	}
	got.TokenRate = want.TokenRate
	return got == want
}

func TestGoldenStreams(t *testing.T) {
	for _, g := range goldens() {
		t.Run(g.file, func(t *testing.T) {
			stream := readTestdata(t, g.file)
			got, sigs := meterEvents(g.dialect, stream)
			want := g.want
			want.Bytes = int64(len(stream))
			if !sameResult(got, want) {
				t.Fatalf("result\n got %+v\nwant %+v", got, want)
			}
			for i, s := range sigs {
				if (s&SigFirstToken != 0) != (i == g.firstAt) {
					t.Errorf("write %d returned %04b; first token expected at write %d", i, s, g.firstAt)
				}
				if s&SigRate != 0 {
					t.Errorf("write %d: unexpected SigRate in a short stream", i)
				}
			}
			var or Signal
			for _, s := range sigs {
				or |= s
			}
			if (or&SigDone != 0) != want.Done {
				t.Errorf("SigDone raised = %v, want %v", or&SigDone != 0, want.Done)
			}
			if (or&SigError != 0) != (want.ErrorClass != ErrNone) {
				t.Errorf("SigError raised = %v, want %v", or&SigError != 0, want.ErrorClass != ErrNone)
			}
		})
	}
}

// TestGoldenSplitAnywhere feeds every golden stream whole, split at every
// byte offset, and in chunks of every size, all at one instant: the Result
// must not depend on where the writes fall.
func TestGoldenSplitAnywhere(t *testing.T) {
	for _, g := range goldens() {
		t.Run(g.file, func(t *testing.T) {
			stream := readTestdata(t, g.file)
			whole := meterChunks(g.dialect, t0, stream)
			if whole.Deltas != g.want.Deltas || whole.Done != g.want.Done || whole.OutputTokens != g.want.OutputTokens {
				t.Fatalf("whole stream: %+v", whole)
			}
			for k := 0; k <= len(stream); k++ {
				if got := meterChunks(g.dialect, t0, stream[:k], stream[k:]); got != whole {
					t.Fatalf("split at %d:\n got %+v\nwant %+v", k, got, whole)
				}
			}
			for n := 1; n <= len(stream); n++ {
				if got := meterChunks(g.dialect, t0, chunk(stream, n)...); got != whole {
					t.Fatalf("chunks of %d:\n got %+v\nwant %+v", n, got, whole)
				}
			}
		})
	}
}

// TestGoldenLineEndings rewrites every golden stream with CRLF, CR and
// mixed line endings: only Result.Bytes may change.
func TestGoldenLineEndings(t *testing.T) {
	variants := map[string]func([]byte) []byte{
		"crlf": func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")) },
		"cr":   func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("\n"), []byte("\r")) },
		"mixed": func(b []byte) []byte {
			// Rotate through the endings, but never let a CR ending be
			// followed by an LF ending (that pair is one CRLF).
			endings := []string{"\n", "\r\n", "\r"}
			var out []byte
			prevCR := false
			for i, line := range strings.Split(string(b), "\n") {
				if i > 0 {
					e := endings[i%3]
					if prevCR && e == "\n" {
						e = "\r"
					}
					out = append(out, e...)
					prevCR = e == "\r"
				}
				if len(line) > 0 {
					prevCR = false
				}
				out = append(out, line...)
			}
			return out
		},
	}
	for _, g := range goldens() {
		stream := readTestdata(t, g.file)
		want := meterChunks(g.dialect, t0, stream)
		for name, conv := range variants {
			t.Run(g.file+"/"+name, func(t *testing.T) {
				s := conv(stream)
				for _, n := range []int{len(s), 1, 2, 3, 64, 4096} {
					got := meterChunks(g.dialect, t0, chunk(s, n)...)
					got.Bytes = want.Bytes
					if got != want {
						t.Fatalf("chunks of %d:\n got %+v\nwant %+v", n, got, want)
					}
				}
			})
		}
	}
}

func TestCloseCountsFinalEvent(t *testing.T) {
	var m Meter
	m.Reset(OpenAIChat, t0)
	sig := m.Write([]byte(`data: {"choices":[{"delta":{"content":"a"}}]}`+"\n\ndata: [DONE]"), t0.Add(step))
	if sig != SigFirstToken {
		t.Fatalf("write: signals %04b", sig)
	}
	if m.Result().Done {
		t.Fatal("done before close")
	}
	if sig := m.Close(t0.Add(2 * step)); sig != SigDone {
		t.Fatalf("close: signals %04b, want SigDone", sig)
	}
	if r := m.Result(); !r.Done || r.Events != 2 {
		t.Fatalf("after close: %+v", r)
	}
	// A final event with its line but no blank line.
	m.Reset(Anthropic, t0)
	m.Write([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n"), t0)
	if m.Result().Deltas != 0 {
		t.Fatal("event dispatched without blank line before close")
	}
	if sig := m.Close(t0.Add(step)); sig != SigFirstToken {
		t.Fatalf("close: signals %04b", sig)
	}
	if r := m.Result(); r.Deltas != 1 || r.TTFT != step {
		t.Fatalf("after close: %+v", r)
	}
}

// deltaStream returns n OpenAI chat content events.
func deltaStream(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(`data: {"choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}` + "\n\n")
	}
	return out
}

func TestRateSamples(t *testing.T) {
	var m Meter
	m.Reset(OpenAIChat, t0)
	var rates []int
	for i, e := range deltaStream(100) {
		sig := m.Write(e, t0.Add(time.Second+time.Duration(i)*step))
		if sig&SigRate != 0 {
			rates = append(rates, i)
			if r := m.RateSample(); !approxEqual(r, 100) {
				t.Fatalf("sample at delta %d: %v tokens/s, want 100", i, r)
			}
		}
	}
	if want := []int{32, 64, 96}; len(rates) != len(want) || rates[0] != 32 || rates[1] != 64 || rates[2] != 96 {
		t.Fatalf("SigRate at deltas %v, want %v", rates, want)
	}
	r := m.Result()
	if r.TTFT != time.Second || r.Deltas != 100 || r.DecodeTime != 99*step || !approxEqual(r.TokenRate, 100) {
		t.Fatalf("result %+v", r)
	}
}

// TestRateSameInstant checks that deltas sharing a timestamp do not yield an
// infinite rate: the sample waits until time advances and covers them all.
func TestRateSameInstant(t *testing.T) {
	var m Meter
	m.Reset(OpenAIChat, t0)
	all := bytes.Join(deltaStream(40), nil)
	if sig := m.Write(all, t0); sig != SigFirstToken {
		t.Fatalf("signals %04b", sig)
	}
	if m.RateSample() != 0 {
		t.Fatal("rate sample without elapsed time")
	}
	if sig := m.Write(deltaStream(1)[0], t0.Add(time.Second)); sig != SigRate {
		t.Fatalf("signals %04b, want SigRate", sig)
	}
	if r := m.RateSample(); !approxEqual(r, 40) {
		t.Fatalf("rate %v, want 40", r)
	}
}

func TestTruncatedEventCountsAsDelta(t *testing.T) {
	big := strings.Repeat("x", maxLine)
	cases := []struct {
		d      Dialect
		stream string
		deltas int
	}{
		{OpenAIChat, `data: {"choices":[{"delta":{"content":"` + big + `"}}]}` + "\n\ndata: [DONE]\n\n", 1},
		{Anthropic, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"" + big + "\"}}\n\n", 1},
		{Anthropic, "event: ping\ndata: " + big + "\n\n", 0},
		{OpenAIResponses, "event: response.output_text.delta\ndata: {\"delta\":\"" + big + "\"}\n\n", 1},
		{OpenAIResponses, "data: {\"type\":\"response.output_text.delta\",\"delta\":\"" + big + "\"}\n\n", 0},
	}
	for i, tc := range cases {
		r := meterChunks(tc.d, t0, []byte(tc.stream))
		if r.Deltas != tc.deltas || r.SkippedLines != 1 {
			t.Errorf("case %d: deltas %d skipped %d, want %d and 1", i, r.Deltas, r.SkippedLines, tc.deltas)
		}
	}
}

func TestZeroMeterAndReset(t *testing.T) {
	var m Meter // zero value: OpenAIChat
	m.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"), t0)
	if r := m.Result(); r.Deltas != 1 || !r.FirstToken {
		t.Fatalf("zero meter: %+v", r)
	}
	// Reset discards everything, including a pending partial line.
	m.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}"), t0)
	m.Reset(OpenAIChat, t0)
	m.Close(t0)
	if r := m.Result(); r != (Result{}) {
		t.Fatalf("after reset: %+v", r)
	}
}

func TestTTFTNeverNegative(t *testing.T) {
	var m Meter
	m.Reset(OpenAIChat, t0)
	m.Write(deltaStream(1)[0], t0.Add(-time.Second))
	if r := m.Result(); r.TTFT != 0 || !r.FirstToken {
		t.Fatalf("%+v", r)
	}
}

func TestChatOutputDeltas(t *testing.T) {
	cases := []struct {
		name, data string
		output     bool
	}{
		{"role_only", `{"choices":[{"delta":{"role":"assistant","content":""}}]}`, false},
		{"content_null", `{"choices":[{"delta":{"role":"assistant","content":null}}]}`, false},
		{"content", `{"choices":[{"delta":{"content":"x"}}]}`, true},
		{"escaped_content", `{"choices":[{"delta":{"content":"\n"}}]}`, true},
		{"reasoning_content", `{"choices":[{"delta":{"reasoning_content":"r"}}]}`, true},
		{"reasoning", `{"choices":[{"delta":{"reasoning":"r"}}]}`, true},
		{"refusal", `{"choices":[{"delta":{"refusal":"no"}}]}`, true},
		{"tool_name_only", `{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":""}}]}}]}`, false},
		{"tool_args", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, true},
		{"second_tool_args", `{"choices":[{"delta":{"tool_calls":[{"function":{}},{"function":{"arguments":"1"}}]}}]}`, true},
		{"completions_text", `{"choices":[{"text":"hi","index":0}]}`, true},
		{"second_choice", `{"choices":[{"delta":{}},{"delta":{"content":"b"}}]}`, true},
		{"usage_chunk", `{"choices":[],"usage":{"completion_tokens":3}}`, false},
		{"nested_content_key_elsewhere", `{"x":{"choices":[{"delta":{"content":"no"}}]},"choices":[]}`, false},
		{"whitespace", " {\t \"choices\" : [ { \"delta\" : { \"content\" : \"y\" } } ] } ", true},
		{"garbage", `{"choices":[{"delta":{"content":`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := meterChunks(OpenAIChat, t0, []byte("data: "+tc.data+"\n\n"))
			if (r.Deltas == 1) != tc.output {
				t.Fatalf("deltas %d, want output=%v", r.Deltas, tc.output)
			}
		})
	}
}

func TestMeterJSON(t *testing.T) {
	cases := []struct {
		file string
		d    Dialect
		want Result
	}{
		{"openai_chat.json", OpenAIChat, Result{FirstToken: true, TTFT: time.Second, OutputTokens: 13,
			TokensFromUsage: true, InputTokens: 21, FinishReason: "stop", Done: true}},
		{"openai_responses.json", OpenAIResponses, Result{FirstToken: true, TTFT: time.Second, OutputTokens: 64,
			TokensFromUsage: true, InputTokens: 50, FinishReason: "incomplete", Done: true}},
		{"anthropic.json", Anthropic, Result{FirstToken: true, TTFT: time.Second, OutputTokens: 6,
			TokensFromUsage: true, InputTokens: 12, FinishReason: "end_turn", Done: true}},
		{"errors/anthropic_529.json", Anthropic, Result{ErrorClass: ErrOverloaded}},
		{"errors/openai_429_quota.json", OpenAIChat, Result{ErrorClass: ErrInsufficientQuota}},
		{"errors/nginx_503.html", OpenAIChat, Result{}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			body := readTestdata(t, tc.file)
			var m Meter
			m.Reset(tc.d, t0)
			m.MeterJSON(body, t0.Add(time.Second))
			want := tc.want
			want.Bytes = int64(len(body))
			if got := m.Result(); got != want {
				t.Fatalf("\n got %+v\nwant %+v", got, want)
			}
		})
	}
	var m Meter
	m.Reset(OpenAIResponses, t0)
	m.MeterJSON([]byte(`{"status":"failed","error":{"code":"server_error","message":"boom"}}`), t0)
	if r := m.Result(); r.ErrorClass != ErrServer || r.FinishReason != "failed" || r.FirstToken || r.Done {
		t.Fatalf("failed response: %+v", r)
	}
}

func TestFinishReasonInterning(t *testing.T) {
	raw := []byte("tool_use")
	if n := testing.AllocsPerRun(100, func() { _ = finishReason(raw, "") }); n != 0 {
		t.Fatalf("known finish reason allocates %v", n)
	}
	if s := finishReason([]byte(`e\u006ed_turn`), ""); s != "end_turn" {
		t.Fatalf("escaped: %q", s)
	}
	if s := finishReason([]byte("weird"), ""); s != "weird" {
		t.Fatalf("unknown: %q", s)
	}
	prev := "weird"
	if n := testing.AllocsPerRun(100, func() { _ = finishReason([]byte("weird"), prev) }); n != 0 {
		t.Fatalf("repeated unknown finish reason allocates %v", n)
	}
	if s := finishReason(bytes.Repeat([]byte("z"), 100), ""); len(s) != 64 {
		t.Fatalf("unknown reason not cut: %d bytes", len(s))
	}
}

// TestWriteZeroAllocs asserts that a warmed meter does not allocate per
// Write, for each dialect, both one event per write and in 4 KiB writes.
func TestWriteZeroAllocs(t *testing.T) {
	for _, g := range goldens() {
		stream := readTestdata(t, g.file)
		for _, mode := range []string{"event", "4k", "7b"} {
			var pieces [][]byte
			switch mode {
			case "event":
				pieces = splitEvents(stream)
			case "4k":
				pieces = chunk(stream, 4096)
			case "7b":
				pieces = chunk(stream, 7)
			}
			var m Meter
			run := func() {
				m.Reset(g.dialect, t0)
				for i, p := range pieces {
					m.Write(p, t0.Add(time.Duration(i)*time.Millisecond))
				}
				m.Close(t0.Add(time.Second))
				_ = m.Result()
			}
			run() // warm buffers
			if n := testing.AllocsPerRun(50, run); n != 0 {
				t.Errorf("%s/%s: %v allocs per stream", g.file, mode, n)
			}
		}
	}
}
