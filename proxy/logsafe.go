package proxy

import (
	"log/slog"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// What peers send never reaches the logs: a malformed request carries the
// client's Authorization header, an upstream's garbage may carry anything,
// and a log line is read by more people than the traffic. fasthttp puts
// the bytes it could not parse into its errors, always quoted with %q
// ("cannot find whitespace in the first line of response \"...\"", "buffer
// size=..., contents: \"...\""); so does Go's standard library where an
// error names a value. Sluice logs errors only through safeError, which
// keeps the message up to its first quoted part.

// FastHTTPLogger returns the logger for a fasthttp server of Sluice's (the
// proxy's and the admin listener's): fasthttp's connection-level messages
// go to l at debug level, with every peer-sent byte left out.
func FastHTTPLogger(l *slog.Logger) fasthttp.Logger { return fasthttpLogger{l} }

// safeArgs makes fasthttp's Printf arguments safe to log: addresses and
// numbers are kept, errors are cut by safeError, anything else (a request
// URI, a header) is replaced.
func safeArgs(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case net.Addr:
			out[i] = v.String()
		case error:
			out[i] = safeError(v)
		case int, int64, uint64, float64, time.Duration:
			out[i] = v
		default:
			out[i] = redactedText
		}
	}
	return out
}

const redactedText = "[redacted]"

// maxLoggedError bounds the part of an error message that is logged.
const maxLoggedError = 256

// safeError returns err's message up to its first quote, backquote or
// byte outside printable ASCII, where the bytes a peer sent begin, with
// "[redacted]" in their place, and at most maxLoggedError bytes.
func safeError(err error) string {
	msg := err.Error()
	for i := 0; i < len(msg); i++ {
		if c := msg[i]; c == '"' || c == '`' || c < 0x20 || c >= 0x7f {
			return truncate(msg[:i]) + redactedText
		}
	}
	return truncate(msg)
}

func truncate(s string) string {
	if len(s) > maxLoggedError {
		return s[:maxLoggedError] + "..."
	}
	return s
}
