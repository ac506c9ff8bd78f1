//go:build race

package adaptive

// raceDetector: the tests run under the race detector, several times
// slower; long single-goroutine simulations run fewer seeds there.
const raceDetector = true
