package scenario

import (
	"fmt"

	"github.com/sluicehq/sluice/bench/load"
)

// Shape is the request body a run's clients send (issue 25): real chat
// code mostly sends no max_tokens, so Sluice's estimates see a guess,
// not the exact output length a load generator could name. The provider
// gets the drawn length in x-sim-output-tokens either way, so both shapes
// see the same answers and measure the same things; only what Sluice can
// read from the body differs.
type Shape uint8

const (
	// ShapeMaxTokens names each request's drawn output size as max_tokens,
	// as the demo does.
	ShapeMaxTokens Shape = iota
	// ShapeNoMaxTokens sends no max_tokens, as most chat code does.
	ShapeNoMaxTokens
)

// Shapes are the request shapes, in report order.
var Shapes = []Shape{ShapeMaxTokens, ShapeNoMaxTokens}

// String names s as the -shapes flag does.
func (s Shape) String() string {
	if s == ShapeNoMaxTokens {
		return "none"
	}
	return "max_tokens"
}

// Label says what s sends, for tables.
func (s Shape) Label() string {
	if s == ShapeNoMaxTokens {
		return "no max_tokens"
	}
	return "max_tokens"
}

// suffix is added to the name of s's files (charts): none for the
// original shape, so its files keep their names.
func (s Shape) suffix() string {
	if s == ShapeNoMaxTokens {
		return "-no-max-tokens"
	}
	return ""
}

// maxTokens is the load generator's setting for s.
func (s Shape) maxTokens() load.MaxTokens {
	if s == ShapeNoMaxTokens {
		return load.MaxTokensNone
	}
	return load.MaxTokensDrawn
}

// MarshalText writes s as String does, for NAME.json.
func (s Shape) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (s *Shape) UnmarshalText(b []byte) error {
	switch string(b) {
	case "max_tokens":
		*s = ShapeMaxTokens
	case "none":
		*s = ShapeNoMaxTokens
	default:
		return fmt.Errorf("scenario: unknown shape %q", b)
	}
	return nil
}

// ParseShapes reads the -shapes flag: "max_tokens", "none" or "both".
func ParseShapes(v string) ([]Shape, error) {
	switch v {
	case "max_tokens":
		return []Shape{ShapeMaxTokens}, nil
	case "none":
		return []Shape{ShapeNoMaxTokens}, nil
	case "both":
		return Shapes, nil
	}
	return nil, fmt.Errorf("scenario: shapes %q: want max_tokens, none or both", v)
}
