package memory

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: a Store
// starts none.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
