//go:build !race

package server

// raceEnabled reports whether the race detector is on: it slows the code
// down several times, so tests that time it allow more.
const raceEnabled = false
