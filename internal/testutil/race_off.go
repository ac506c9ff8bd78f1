//go:build !race

package testutil

// RaceDetector: see race_on.go.
const RaceDetector = false
