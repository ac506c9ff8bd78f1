package load

import (
	"fmt"
	"strconv"
)

// MaxTokens says what a request body's max_tokens holds (issue 25).
//
// Most chat code, and the official OpenAI SDKs unless asked, send no
// max_tokens, so a proxy that sizes requests by it sees only a guess; a
// load generator that always sends the exact output length shows it a
// world that real clients do not. Anthropic's Messages API requires
// max_tokens, and code written for it sends one fixed ceiling (1024, 4096)
// whatever the answer's length: a positive MaxTokens models that.
//
// Whatever the body says, with [Config.SimHeaders] the drawn output length
// still reaches the simulated provider in x-sim-output-tokens, so the
// provider produces the same answers and only what Sluice can read from
// the body differs. (The provider stops at max_tokens when it is smaller.)
type MaxTokens int

const (
	// MaxTokensDrawn, the zero value, sends each request's drawn output
	// size as max_tokens: the generator's only shape before issue 25, kept
	// as the zero value so that callers that predate the choice keep their
	// requests. A zero Output Dist draws 0, and 0 is not sent.
	MaxTokensDrawn MaxTokens = 0
	// MaxTokensNone sends no max_tokens, as most chat code and the OpenAI
	// SDKs do by default. (A real Anthropic endpoint refuses such a body
	// with 400; the simulator and Sluice accept it.)
	MaxTokensNone MaxTokens = -1
)

// ParseMaxTokens reads the -max-tokens flag's forms: "none", "drawn", or a
// positive integer (a fixed ceiling on every request).
func ParseMaxTokens(s string) (MaxTokens, error) {
	switch s {
	case "none", "":
		return MaxTokensNone, nil
	case "drawn":
		return MaxTokensDrawn, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("load: max_tokens %q: want none, drawn or a positive number of tokens", s)
	}
	return MaxTokens(n), nil
}

// String returns the form ParseMaxTokens reads.
func (m MaxTokens) String() string {
	switch {
	case m == MaxTokensDrawn:
		return "drawn"
	case m < 0:
		return "none"
	}
	return strconv.Itoa(int(m))
}

// value returns the max_tokens to send for a drawn output size, 0 for
// none.
func (m MaxTokens) value(output int) int {
	switch {
	case m == MaxTokensDrawn:
		return output
	case m < 0:
		return 0
	}
	return int(m)
}
