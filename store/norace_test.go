//go:build !race

package store_test

// raceEnabled reports whether the race detector is on: it slows the code
// down several times, so tests that time it allow more.
const raceEnabled = false
