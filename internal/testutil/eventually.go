// Package testutil holds what the tests of several Sluice packages share:
// waiting for a condition, the built binaries, and the test tiers. It
// imports nothing of Sluice's, and only _test.go files import it; the
// import-rule test in cmd/sluice checks both.
package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond until it holds and returns how long that took; if
// within passes first, it fails t, naming what it waited for. The first
// polls come quickly, so a condition that is almost true costs almost
// nothing, then the interval grows to 10 ms so that a long wait does not
// take a core from the code it waits for.
func Eventually(t testing.TB, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	pause := 100 * time.Microsecond
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 10*time.Millisecond)
	}
	return time.Since(start)
}
