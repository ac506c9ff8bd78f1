package testutil

import (
	"os"
	"testing"
)

func TestBinaryFromEnv(t *testing.T) {
	p := t.TempDir() + "/sluice"
	if err := os.WriteFile(p, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_BIN", p)
	if got := Binary(t, "sluice"); got != p {
		t.Fatalf("Binary = %q, want SLUICE_BIN's %q", got, p)
	}
}
