package sluice

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// TestForgetImported: a leader forgets an imported entry once its cell has
// expired or no pull has read it for importMemory, and keeps the others.
func TestForgetImported(t *testing.T) {
	const now = 1_000_000
	cell := func(id string, seq int64) origin.Cell {
		return origin.Cell{Key: origin.Key{Namespace: "ns", Identifier: id, Duration: time.Minute}, Sequence: seq}
	}
	live := now / time.Minute.Milliseconds()
	imported := map[entryKey]importedEntry{
		{cell("read lately", live), "eu"}:       {count: 3, seen: now - 1_000},
		{cell("read long ago", live), "eu"}:     {count: 3, seen: now - importMemory - 1},
		{cell("read at the bound", live), "us"}: {count: 3, seen: now - importMemory},
		{cell("expired", live-2), "eu"}:         {count: 3, seen: now},
	}
	forgetImported(imported, now)
	var kept []string
	for k := range imported {
		kept = append(kept, k.cell.Identifier)
	}
	slices.Sort(kept)
	if want := []string{"read at the bound", "read lately"}; !slices.Equal(kept, want) {
		t.Fatalf("kept %v, want %v", kept, want)
	}
}
