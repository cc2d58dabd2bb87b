package mysql

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/global/globaltest"
)

// TestConformance runs the global.Store suite with a 1µs cursor overlap:
// the suite's calls never overlap in time, so no cell is reported again.
func TestConformance(t *testing.T) {
	globaltest.Run(t, func(t *testing.T) global.Store {
		return openStore(t, Config{CursorOverlap: time.Microsecond})
	})
}
