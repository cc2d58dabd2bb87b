// Package window is the pure arithmetic of Sluice's sliding window: fixed
// window cells evaluated as a sliding window, exactly, on integers.
//
// Nothing here reads a clock, allocates or performs I/O; every function is a
// deterministic function of its arguments, so the decision rule can be tested
// exhaustively and reused by the limiter, the simulator and the reference
// model's tests alike. Times and durations are Unix milliseconds.
package window

import (
	"math"
	"math/bits"
)

// Position locates an instant t within the fixed windows of length d.
type Position struct {
	Seq     int64 // floor(t / d): the current cell
	Elapsed int64 // t - Seq*d: milliseconds into the current cell
	D       int64 // the window length in milliseconds
}

// At returns the position of t (>= 0) in windows of length d (>= 1).
func At(t, d int64) Position {
	seq := t / d
	return Position{Seq: seq, Elapsed: t - seq*d, D: d}
}

// Reset returns the end of the current cell, (Seq+1)*D, saturated at
// math.MaxInt64.
func (p Position) Reset() int64 {
	start := p.Seq * p.D
	if start > math.MaxInt64-p.D {
		return math.MaxInt64
	}
	return start + p.D
}

// Weighted returns floor(prev * (D - Elapsed) / D): the part of the previous
// cell that still overlaps the sliding window. It is exact for every prev >= 0
// (the product is taken on 128 bits).
func (p Position) Weighted(prev int64) int64 {
	if prev <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(prev), uint64(p.D-p.Elapsed))
	q, _ := bits.Div64(hi, lo, uint64(p.D)) // hi < D because D-Elapsed <= D
	return int64(q)
}

// Before returns cur + Weighted(prev), the usage the window has seen before a
// request, saturated at math.MaxInt64.
func (p Position) Before(cur, prev int64) int64 {
	return Add(cur, p.Weighted(prev))
}

// Add returns a + b for non-negative a and b, saturated at math.MaxInt64.
func Add(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Outcome is the answer of the sliding window to one request.
type Outcome struct {
	Success   bool
	Current   int64 // before + cost on success, before otherwise
	Remaining int64 // max(0, limit - Current)
}

// Decide applies the decision rule to usage before (>= 0), limit (>= 0) and
// cost (>= 0): the request passes when before + cost <= limit.
func Decide(before, limit, cost int64) Outcome {
	success := before <= limit && cost <= limit-before
	current := before
	if success {
		current += cost
	}
	return Outcome{Success: success, Current: current, Remaining: max(0, limit-current)}
}
