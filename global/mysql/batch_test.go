package mysql

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// decodeAll returns the cells decodeBatch yields at now, and its error.
func decodeAll(payload []byte, now int64) ([]global.Count, error) {
	var out []global.Count
	err := decodeBatch(payload, now, func(c origin.Cell, n int64) {
		out = append(out, global.Count{Cell: c, Count: n, ExpiresAt: cellExpiresAt(c)})
	})
	return out, err
}

// TestBatchRoundTrip: any set of cells, sorted and packed, decodes to the
// same cells and counts, those expired at the reader's now left out.
func TestBatchRoundTrip(t *testing.T) {
	field := rapid.StringOfN(rapid.RuneFrom([]rune("ab:\x00ü")), 0, 6, 24)
	rapid.Check(t, func(t *rapid.T) {
		seen := map[origin.Cell]bool{}
		var counts []global.Count
		for range rapid.IntRange(1, 40).Draw(t, "cells") {
			c := origin.Cell{
				Key: origin.Key{
					Workspace: field.Draw(t, "ws"), Namespace: field.Draw(t, "ns"), Identifier: field.Draw(t, "id"),
					Duration: time.Duration(rapid.SampledFrom([]int64{1, 1000, 60_000, 86_400_000}).Draw(t, "ms")) * time.Millisecond,
				},
				Sequence: rapid.Int64Range(-5, 1<<40).Draw(t, "seq"),
			}
			if seen[c] {
				continue
			}
			seen[c] = true
			counts = append(counts, global.Count{Cell: c, Count: rapid.Int64Range(1, 1<<62).Draw(t, "count"), ExpiresAt: cellExpiresAt(c)})
		}
		slices.SortFunc(counts, func(a, b global.Count) int { return compareCells(a.Cell, b.Cell) })
		now := rapid.Int64Range(0, 1<<42).Draw(t, "now")
		b := encodeBatch(counts)
		got, err := decodeAll(b.payload, now)
		if err != nil {
			t.Fatal(err)
		}
		want := slices.DeleteFunc(slices.Clone(counts), func(c global.Count) bool { return c.ExpiresAt <= now })
		if !slices.Equal(got, want) {
			t.Fatalf("decoded %v, want %v", got, want)
		}
		if b.cells != len(counts) || b.expiresAt != slices.MaxFunc(counts, func(a, b global.Count) int { return cmp.Compare(a.ExpiresAt, b.ExpiresAt) }).ExpiresAt {
			t.Fatalf("batch of %d cells expiring at %d, want %d cells", b.cells, b.expiresAt, len(counts))
		}
	})
}

// TestBatchSize: sorted cells of one workspace, namespace and duration
// take a few bytes beyond what their identifiers do not share.
func TestBatchSize(t *testing.T) {
	var counts []global.Count
	for i := range 500 {
		c := origin.Cell{Key: origin.Key{Workspace: "ws_1234567890", Namespace: "api.requests", Duration: time.Minute,
			Identifier: fmt.Sprintf("user-%06d", i)}, Sequence: 29_000_000}
		counts = append(counts, global.Count{Cell: c, Count: 42, ExpiresAt: cellExpiresAt(c)})
	}
	b := encodeBatch(counts)
	if per := float64(len(b.payload)) / 500; per > 8 {
		t.Fatalf("%.1f bytes a cell, want at most 8 for 11-byte identifiers sharing 8", per)
	}
}

// TestBatchWorstRowFitsAStatement: a row of MaxChunkRows cells whose
// fields all differ and are MaxFieldBytes long, with the largest integers,
// stays within maxCellBytes a cell, and such a row fits one statement's
// payload (maxStatementPayload).
func TestBatchWorstRowFitsAStatement(t *testing.T) {
	field := func(c byte, i int) string {
		return fmt.Sprintf("%06d", i) + strings.Repeat(string(c), MaxFieldBytes-6)
	}
	counts := make([]global.Count, MaxChunkRows)
	for i := range counts {
		c := origin.Cell{Key: origin.Key{Workspace: field('w', i), Namespace: field('n', i), Identifier: field('i', i),
			Duration: time.Duration(math.MaxInt64/int64(time.Millisecond)-int64(i)) * time.Millisecond},
			Sequence: math.MinInt64 / 2 * int64(1-2*(i%2))}
		counts[i] = global.Count{Cell: c, Count: math.MaxInt64, ExpiresAt: math.MaxInt64}
	}
	b := encodeBatch(counts)
	if per := len(b.payload) / MaxChunkRows; per > maxCellBytes {
		t.Fatalf("%d bytes a cell, more than maxCellBytes (%d)", per, maxCellBytes)
	}
	if MaxChunkRows*maxCellBytes > maxStatementPayload {
		t.Fatalf("a row may take %d bytes, more than a statement's payload (%d)", MaxChunkRows*maxCellBytes, maxStatementPayload)
	}
}

// TestBatchDecodeRejects: payloads this package does not write are
// refused with errBadBatch, never a panic; the cells before the fault are
// yielded.
func TestBatchDecodeRejects(t *testing.T) {
	c := origin.Cell{Key: origin.Key{Workspace: "w", Namespace: "n", Identifier: "id", Duration: time.Minute}, Sequence: 100}
	good := encodeBatch([]global.Count{{Cell: c, Count: 3, ExpiresAt: cellExpiresAt(c)}}).payload
	for _, tc := range []struct {
		name    string
		payload []byte
		cells   int // yielded before the fault
	}{
		{"empty", nil, 0},
		{"another format", append([]byte{2}, good[1:]...), 0},
		{"cut short", good[:len(good)-1], 0},
		{"trailing bytes", append(slices.Clone(good), 0), 1},
		{"more cells than bytes", []byte{batchFormat, 200, 7}, 0},
		{"first cell without its fields", []byte{batchFormat, 1, 0, 0, 1, 'x', 0, 1}, 0},
		{"unknown flag", []byte{batchFormat, 1, 0x0f}, 0},
		{"shares more than the previous identifier", []byte{batchFormat, 1, flagsAll, 0, 0, 1, 5, 1, 'x', 0, 1}, 0},
		{"zero duration", []byte{batchFormat, 1, flagsAll, 0, 0, 0, 0, 1, 'x', 0, 1}, 0},
		{"zero count", []byte{batchFormat, 1, flagsAll, 0, 0, 1, 0, 1, 'x', 0, 0}, 0},
		{"a field over MaxFieldBytes", append([]byte{batchFormat, 1, flagsAll}, binary.AppendUvarint(nil, MaxFieldBytes+1)...), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeAll(tc.payload, 0)
			if !errors.Is(err, errBadBatch) {
				t.Fatalf("error %v, want errBadBatch", err)
			}
			if len(got) != tc.cells {
				t.Fatalf("yielded %d cells, want %d", len(got), tc.cells)
			}
		})
	}
}

// FuzzDecodeBatch: any payload decodes without a panic, to cells within
// the store's bounds, or fails with errBadBatch; what it decodes to, in
// order, encodes to a payload that decodes to the same.
func FuzzDecodeBatch(f *testing.F) {
	c := origin.Cell{Key: origin.Key{Workspace: "w", Namespace: "n", Identifier: "user-1", Duration: time.Minute}, Sequence: 100}
	d := c
	d.Identifier, d.Sequence = "user-2", 101
	f.Add(encodeBatch([]global.Count{{Cell: c, Count: 3}, {Cell: d, Count: 9}}).payload)
	f.Add([]byte{batchFormat, 1, flagsAll, 0, 0, 1, 0, 1, 'x', 0, 1})
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, err := decodeAll(payload, 0)
		if err != nil && !errors.Is(err, errBadBatch) {
			t.Fatalf("error %v does not wrap errBadBatch", err)
		}
		for _, c := range got {
			if cellProblem(c.Cell) != "" || c.Count < 1 {
				t.Fatalf("decoded %+v, which the store cannot hold", c)
			}
		}
		if len(got) == 0 {
			return
		}
		slices.SortFunc(got, func(a, b global.Count) int { return compareCells(a.Cell, b.Cell) })
		again, err := decodeAll(encodeBatch(got).payload, 0)
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("re-encoded %v decodes to %v, %v", got, again, err)
		}
	})
}
