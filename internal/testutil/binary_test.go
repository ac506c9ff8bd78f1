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

func TestProcessTier(t *testing.T) {
	ran := false
	t.Run("unit", func(t *testing.T) {
		t.Setenv(TierEnv, "unit")
		Process(t)
		ran = true
	})
	if ran {
		t.Fatal("the unit tier ran a process-level test")
	}
	t.Run("all", func(t *testing.T) {
		t.Setenv(TierEnv, "")
		Process(t)
		ran = true
	})
	if !ran {
		t.Fatal("a process-level test was skipped with the tier unset")
	}
}
