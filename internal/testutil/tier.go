package testutil

import (
	"os"
	"testing"
)

// TierEnv selects the tests of a `go test` run: "unit" leaves out the
// process-level tests (make test), anything else, or unset, runs them
// too (make test-process, and `go test ./...` alone).
const TierEnv = "SLUICE_TEST_TIER"

// Process marks t as a process-level test: it starts binaries or
// redis-server, or holds real sockets for seconds. The unit tier (make
// test) skips it; make test-process and make check run it.
func Process(t testing.TB) {
	t.Helper()
	if os.Getenv(TierEnv) == "unit" {
		t.Skip("process-level test: make test-process runs it")
	}
}

// MeasureEnv, set to 1, runs the measurements: tests that log what
// something costs (memory per stream, time to free a permit) rather than
// assert a behaviour. make measure sets it; the numbers go to
// BENCHMARKS.md.
const MeasureEnv = "SLUICE_MEASURE"

// Measurement marks t as a measurement: skipped unless MeasureEnv is 1. A
// measurement that also checks a behaviour keeps a fast test of that
// behaviour beside it.
func Measurement(t testing.TB) {
	t.Helper()
	if os.Getenv(MeasureEnv) != "1" {
		t.Skip("measurement: make measure runs it (" + MeasureEnv + "=1)")
	}
}

// Simulation marks t as a simulation that runs in one goroutine in
// virtual time: the race detector has nothing to find in it and slows it
// several times, so it is skipped under -race. make test runs the
// simulations in a second go test without -race.
func Simulation(t testing.TB) {
	t.Helper()
	if RaceDetector {
		t.Skip("single-goroutine simulation: make test runs it without -race")
	}
}
