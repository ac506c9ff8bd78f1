package proxy

import (
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
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
	}
	bodies := buildErrorBodies("p")
	var ctx fasthttp.RequestCtx
	for o := outcome(0); o < numOutcomes; o++ {
		if outcomes[o].status == 0 {
			continue
		}
		for _, ra := range answered(o) {
			for _, anthropic := range []bool{false, true} {
				answer(&ctx, bodies, anthropic, o, ra)
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
		if outcomes[o].status == 0 || outcomes[o].openai == "" {
			continue
		}
		for _, ra := range answered(o) {
			for _, anthropic := range []bool{false, true} {
				answer(&ctx, bodies, anthropic, o, ra)
				body := string(ctx.Response.Body())
				hasRA := len(ctx.Response.Header.Peek("Retry-After")) > 0
				if strings.Contains(body, "Retry-After") && !hasRA {
					t.Errorf("%s (anthropic %v): the message points at a Retry-After the answer lacks: %s", o, anthropic, body)
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
			answer(&ctx, bodies, true, o, ra) // warm the header and body buffers
			if n := testing.AllocsPerRun(100, func() { answer(&ctx, bodies, true, o, ra) }); n != 0 {
				t.Errorf("answering %s (Retry-After %v) allocates %v times", o, ra, n)
			}
		}
	}
}
