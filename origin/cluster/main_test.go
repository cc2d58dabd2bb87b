package cluster

import (
	mathrand "math/rand/v2"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/origin"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// Origin, Membership and Registry must stop what it started.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newWriter returns a writer of its own for a test: its first write of n
// adds n.
func newWriter() origin.Writer { return origin.Writer(mathrand.Uint64()) }

// add returns a delta that adds n to cell c: the first write of a new
// writer.
func add(c origin.Cell, n int64) origin.Delta {
	return origin.Delta{Cell: c, Writer: newWriter(), Sent: n}
}
