package load

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// serve runs handler on a loopback listener for the test and returns its
// base URL.
func serve(t *testing.T, handler fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: handler, MaxIdleWorkerDuration: 50 * time.Millisecond}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// okStream answers with a two-token OpenAI stream.
func okStream(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("text/event-stream")
	ctx.SetBodyString(`data: {"choices":[{"delta":{"content":"a"}}]}` + "\n\n" +
		`data: {"choices":[{"delta":{"content":"b"}}]}` + "\n\ndata: [DONE]\n\n")
}

func TestParseMaxTokens(t *testing.T) {
	for in, want := range map[string]MaxTokens{"none": MaxTokensNone, "": MaxTokensNone, "drawn": MaxTokensDrawn, "4096": 4096} {
		got, err := ParseMaxTokens(in)
		if err != nil || got != want {
			t.Errorf("ParseMaxTokens(%q) = %v, %v; want %v", in, got, err, want)
		}
		if in != "" {
			if s := got.String(); s != in {
				t.Errorf("%v.String() = %q, want %q", got, s, in)
			}
		}
	}
	for _, bad := range []string{"0", "-3", "all", "1.5"} {
		if _, err := ParseMaxTokens(bad); err == nil {
			t.Errorf("ParseMaxTokens(%q) accepted", bad)
		}
	}
}

// TestBodyShape checks, from inside the server, what each MaxTokens puts
// in the body and that the drawn output length reaches the provider in
// x-sim-output-tokens whatever the body says.
func TestBodyShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode MaxTokens
		want func(drawn int) int // max_tokens expected in the body; 0: absent
	}{
		{MaxTokensNone, func(int) int { return 0 }},
		{MaxTokensDrawn, func(d int) int { return d }},
		{4096, func(int) int { return 4096 }},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			var seen atomic.Int64
			base := serve(t, func(ctx *fasthttp.RequestCtx) {
				var body struct {
					Model     string `json:"model"`
					Stream    bool   `json:"stream"`
					MaxTokens *int   `json:"max_tokens"`
					Messages  []struct {
						Role, Content string
					} `json:"messages"`
				}
				if err := json.Unmarshal(ctx.PostBody(), &body); err != nil {
					t.Errorf("body is not JSON: %v", err)
				}
				drawn, err := strconv.Atoi(string(ctx.Request.Header.Peek("x-sim-output-tokens")))
				if err != nil || drawn <= 0 {
					t.Errorf("x-sim-output-tokens %q", ctx.Request.Header.Peek("x-sim-output-tokens"))
				}
				got := 0
				if body.MaxTokens != nil {
					got = *body.MaxTokens
					if got <= 0 {
						t.Errorf("max_tokens %d sent", got)
					}
				}
				if want := tc.want(drawn); got != want {
					t.Errorf("max_tokens %d with %d drawn, want %d", got, drawn, want)
				}
				if !body.Stream || body.Model != "sim-model" || len(body.Messages) != 1 || body.Messages[0].Role != "user" {
					t.Errorf("body %+v", body)
				}
				seen.Add(1)
				okStream(ctx)
			})
			res, err := Run(context.Background(), Config{
				URL: base + "/v1/chat/completions", Stream: true, SimHeaders: true, MaxTokens: tc.mode,
				Clients: 2, Duration: 150 * time.Millisecond,
				Prompt: Dist{Mean: 100}, Output: Dist{Mean: 50, Sigma: 0.5, Max: 200},
			})
			if err != nil {
				t.Fatal(err)
			}
			// A request cut at the end may or may not have arrived.
			if s, n := res.Summary(), int(seen.Load()); s.OK == 0 || n < s.OK || n > s.OK+s.Cut {
				t.Fatalf("%d requests seen, summary %+v", n, s)
			}
		})
	}
}

func TestUsageTokens(t *testing.T) {
	for body, want := range map[string]int{
		`{"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`: 34,
		`{"usage":{"input_tokens":12,"output_tokens": 7}}`:                        7,
		`{"usage":null}`:                      99,
		`{"usage":{"completion_tokens":"x"}}`: 99,
	} {
		if got := usageTokens([]byte(body), 99); got != want {
			t.Errorf("usageTokens(%s) = %d, want %d", body, got, want)
		}
	}
}
