package sim

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a run leaves a goroutine behind (a
// limiter not closed, a replay round still waiting at its gate).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
