package config

import (
	"fmt"
	"log/slog"
)

// Secret holds a credential. It never prints: every fmt verb (including %v,
// %+v, %#v, %s, %q, %x and %d), JSON/YAML/text marshalling and slog render it
// as "[redacted]", so a Config or Provider can be logged or dumped safely.
// Use string(s) to read the value where it is needed (e.g. when setting the
// upstream Authorization header), and nowhere else.
type Secret string

const redacted = "[redacted]"

// String returns "[redacted]".
func (Secret) String() string { return redacted }

// GoString returns "[redacted]".
func (Secret) GoString() string { return redacted }

// Format writes "[redacted]" whatever the verb, so no verb can show the value.
func (Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalText returns "[redacted]" (used by encoding/json, YAML and others).
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue returns "[redacted]" for log/slog.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// IsSet reports whether the secret holds a value.
func (s Secret) IsSet() bool { return s != "" }
