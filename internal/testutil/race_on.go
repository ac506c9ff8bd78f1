//go:build race

package testutil

// RaceDetector reports whether the test binary runs under the race
// detector.
const RaceDetector = true
