package settings

import "testing"

// TestLimitComplete: a defaulted min and initial follow a small ceiling
// and an explicit min; an explicit initial is checked, not repaired.
func TestLimitComplete(t *testing.T) {
	t.Parallel()
	s := DefaultLimit()
	s.Ceiling = 1
	s = s.Complete(func(string) bool { return false })
	if s.Min != 1 || s.Initial != 1 || len(s.Problems()) != 0 {
		t.Fatalf("ceiling 1 alone: %+v, problems %v", s, s.Problems())
	}
	s = DefaultLimit()
	s.Ceiling, s.Min = 100, 30
	s = s.Complete(func(p string) bool { return p == "min" })
	if s.Min != 30 || s.Initial != 30 {
		t.Fatalf("min 30 set, initial defaulted: %+v, want initial raised to 30", s)
	}
	s = DefaultLimit()
	s.Ceiling, s.Initial = 5, 40
	s = s.Complete(func(p string) bool { return p == "initial" })
	if len(s.Problems()) != 1 || s.Problems()[0].Key != "initial" {
		t.Fatalf("explicit initial above the ceiling: problems %v, want one for initial", s.Problems())
	}
}
