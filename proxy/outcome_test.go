package proxy

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/feedback"
)

// answered lists, for each outcome Sluice answers itself, the Retry-After
// values end can give it: none for raNone, both for raEstimate (no
// estimate before a permit has ended), one for raOne and raComputed.
func answered(o outcome) []time.Duration {
	switch outcomes[o].ra {
	case raEstimate:
		return []time.Duration{0, 3 * time.Second}
	case raOne, raComputed:
		return []time.Duration{time.Second}
	}
	return []time.Duration{0}
}

// Refusals that a retry of the same request cannot change carry
// "x-should-retry: false" (the OpenAI and Anthropic SDKs would otherwise
// retry over_quota, a 429, like any rate limit); no answer says "true".
func TestFinalRefusalsSayShouldRetryFalse(t *testing.T) {
	t.Parallel()
	final := map[outcome]bool{
		outNoRoute: true, outMethodNotAllowed: true, outBadPath: true,
		outBodyTooLarge: true, outHeadersTooLarge: true, outOverQuota: true,
		outUnknownClient: true, outProviderNotAllowed: true,
	}
	bodies := buildErrorBodies("p")
	var ctx fasthttp.RequestCtx
	for o := outcome(0); o < numOutcomes; o++ {
		if outcomes[o].status == 0 {
			continue
		}
		for _, ra := range answered(o) {
			for _, d := range append(feedback.Dialects(), 0) {
				answer(&ctx, bodies, d, o, ra)
				got := string(ctx.Response.Header.Peek(HeaderShouldRetry))
				want := ""
				if final[o] {
					want = "false"
				}
				if got != want {
					t.Errorf("%s (Retry-After %v): %s %q, want %q", o, ra, HeaderShouldRetry, got, want)
				}
			}
		}
	}
}

// A refusal's message tells the client to wait for Retry-After only when
// the answer carries one: a queue refusal before any permit has ended has
// no estimate, so no Retry-After, and its message says to back off.
func TestRefusalMessagesMatchRetryAfter(t *testing.T) {
	t.Parallel()
	bodies := buildErrorBodies("p")
	var ctx fasthttp.RequestCtx
	for o := outcome(0); o < numOutcomes; o++ {
		if outcomes[o].status == 0 || outcomes[o].message == "" {
			continue
		}
		for _, ra := range answered(o) {
			for _, d := range append(feedback.Dialects(), 0) {
				answer(&ctx, bodies, d, o, ra)
				body := string(ctx.Response.Body())
				hasRA := len(ctx.Response.Header.Peek("Retry-After")) > 0
				if strings.Contains(body, "Retry-After") && !hasRA {
					t.Errorf("%s (%v): the message points at a Retry-After the answer lacks: %s", o, d, body)
				}
				if strings.Contains(body, "%r") || strings.Contains(body, "%s") {
					t.Errorf("%s: unexpanded verb in %s", o, body)
				}
				if outcomes[o].ra == raEstimate {
					if want := map[bool]string{false: hintBackoff, true: hintRetryAfter}[hasRA]; !strings.Contains(body, want) {
						t.Errorf("%s (Retry-After %v): %s, want it to say %q", o, ra, body, want)
					}
				}
			}
		}
	}
}

// Answering copies prebuilt bytes: no allocation, with or without
// Retry-After.
func TestAnswerDoesNotAllocate(t *testing.T) {
	bodies := buildErrorBodies("p")
	var ctx fasthttp.RequestCtx
	for _, o := range []outcome{outQueueFull, outOverQuota, outBodyTooLarge} {
		for _, ra := range []time.Duration{0, 1500 * time.Millisecond} {
			answer(&ctx, bodies, feedback.Anthropic, o, ra) // warm the header and body buffers
			if n := testing.AllocsPerRun(100, func() { answer(&ctx, bodies, feedback.Anthropic, o, ra) }); n != 0 {
				t.Errorf("answering %s (Retry-After %v) allocates %v times", o, ra, n)
			}
		}
	}
}

// Sluice's own error bodies are the same bytes in every dialect of a shape
// as testdata/error_bodies.golden, recorded when the shape was chosen by
// a bool: the OpenAI shape for OpenAIChat, OpenAIResponses and the zero
// Dialect, the Anthropic one for Anthropic.
func TestErrorBodiesGolden(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile("testdata/error_bodies.golden")
	if err != nil {
		t.Fatal(err)
	}
	b := *buildErrorBodies("p")
	for _, shape := range []struct {
		name string
		ds   []feedback.Dialect
	}{{"openai", []feedback.Dialect{0, feedback.OpenAIChat, feedback.OpenAIResponses}}, {"anthropic", []feedback.Dialect{feedback.Anthropic}}} {
		for _, d := range shape.ds {
			var sb strings.Builder
			for ra := 0; ra < 2; ra++ {
				for o := outcome(0); o < numOutcomes; o++ {
					if x := b[d][ra][o]; x != nil {
						fmt.Fprintf(&sb, "%s ra=%d %s %s\n", shape.name, ra, o, x)
					}
				}
			}
			if got := sb.String(); !strings.Contains(string(want), got) || !strings.HasPrefix(got, shape.name) {
				t.Errorf("%v: error bodies differ from error_bodies.golden:\n%s", d, got)
			}
		}
	}
}
