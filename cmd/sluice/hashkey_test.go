package main

import (
	"io"
	"strings"
	"testing"
)

// `sluice hash-key` prints the SHA-256 that a clients: entry's key_sha256
// holds (`printf %s sk-test | sha256sum`), from stdin or an environment
// variable, without surrounding spaces; a key on the command line is a
// usage error, never hashed, and never echoed.
func TestHashKey(t *testing.T) {
	defer func(r io.Reader) { stdin = r }(stdin)
	for _, in := range []string{"test", "test\n", "  test \r\n", "test\nsecond line"} {
		stdin = strings.NewReader(in)
		code, out, errOut := runCLI("hash-key")
		if code != exitOK || out != "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n" {
			t.Errorf("stdin %q: exit %d, stdout %q, stderr %q", in, code, out, errOut)
		}
	}
	t.Setenv("SLUICE_TEST_KEY", "test")
	if code, out, _ := runCLI("hash-key", "-env", "SLUICE_TEST_KEY"); code != exitOK || !strings.HasPrefix(out, "9f86d081") {
		t.Errorf("-env: exit %d, stdout %q", code, out)
	}
	stdin = strings.NewReader("\n")
	if code, _, errOut := runCLI("hash-key"); code != exitFailure || !strings.Contains(errOut, "no key") {
		t.Errorf("empty key: exit %d, stderr %q", code, errOut)
	}
	code, out, errOut := runCLI("hash-key", "sk-secret-on-argv")
	if code != exitUsage || out != "" || strings.Contains(errOut, "sk-secret-on-argv") {
		t.Errorf("key on argv: exit %d, stdout %q", code, out)
	}
}
