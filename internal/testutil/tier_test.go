package testutil

import "testing"

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

func TestSimulationSkipsUnderRace(t *testing.T) {
	ran := false
	t.Run("sim", func(t *testing.T) {
		Simulation(t)
		ran = true
	})
	if ran == RaceDetector {
		t.Fatalf("simulation ran %v with the race detector %v", ran, RaceDetector)
	}
}
