package cluster

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// Origin, Membership and Registry must stop what it started.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
