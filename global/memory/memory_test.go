package memory_test

import (
	"testing"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/global/globaltest"
	"github.com/sluicehq/sluice/global/memory"
)

func TestConformance(t *testing.T) {
	globaltest.Run(t, func(*testing.T) global.Store { return memory.New() })
}
