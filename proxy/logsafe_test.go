package proxy

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
)

// safeError keeps what Sluice and the libraries say and drops what a peer
// sent, which they quote.
func TestSafeError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ err, want string }{
		{"dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused"},
		{`error when reading response headers: invalid response status code "SECRET": response "SECRET\r\n"`, "error when reading response headers: invalid response status code [redacted]"},
		{"buffer size=12, contents: `SECRET`", "buffer size=12, contents: [redacted]"},
		{"raw \x01SECRET", "raw [redacted]"},
		{"utf-8 \xc3\xa9SECRET", "utf-8 [redacted]"},
		{strings.Repeat("a", 300), strings.Repeat("a", maxLoggedError) + "..."},
	} {
		if got := safeError(errors.New(c.err)); got != c.want {
			t.Errorf("safeError(%q) = %q, want %q", c.err, got, c.want)
		}
	}
}

// fasthttp's messages keep addresses and numbers and lose everything else.
func TestFastHTTPLoggerDropsPeerBytes(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := FastHTTPLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	l.Printf("error when serving connection %q<->%q: %v", addr, addr, errors.New(`cannot parse "Authorization: Bearer SECRET"`))
	l.Printf("%.3f %s - %s", 1.5, "POST /x?key=SECRET", "msg")
	l.Printf("%d concurrent connections", 7)
	out := buf.String()
	if strings.Contains(out, "SECRET") {
		t.Fatalf("peer bytes logged:\n%s", out)
	}
	for _, want := range []string{"127.0.0.1:8080", "cannot parse [redacted]", "7 concurrent connections", "source=fasthttp", "level=DEBUG"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}
