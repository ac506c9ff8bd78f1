//go:build race

package proxy

// raceEnabled: allocation counts are not meaningful under the race detector.
const raceEnabled = true
