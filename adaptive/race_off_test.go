//go:build !race

package adaptive

// raceDetector: see race_on_test.go.
const raceDetector = false
