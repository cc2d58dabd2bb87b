package mysql

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// idHash is the key of an identity in the tables: SHA-256 of the
// length-prefixed workspace, namespace and identifier. The lengths make the
// encoding injective, so distinct identities never share an input.
type idHash [sha256.Size]byte

func hashKey(k origin.Key) idHash {
	h := sha256.New()
	var n [8]byte
	for _, f := range []string{k.Workspace, k.Namespace, k.Identifier} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	var out idHash
	h.Sum(out[:0])
	return out
}

// rowKey is the primary key of a cell's rows, without the region.
type rowKey struct {
	hash       idHash
	durationMS int64
	seq        int64
}

func keyOf(c origin.Cell) rowKey {
	return rowKey{hash: hashKey(c.Key), durationMS: c.Duration.Milliseconds(), seq: c.Sequence}
}

// compare orders keys as InnoDB orders the primary key: bytes, then signed
// integers.
func (a rowKey) compare(b rowKey) int {
	if c := bytes.Compare(a.hash[:], b.hash[:]); c != 0 {
		return c
	}
	if c := cmp.Compare(a.durationMS, b.durationMS); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// cellProblem returns why c cannot be stored exactly, or "".
func cellProblem(c origin.Cell) string {
	d := c.Duration
	switch {
	case d < time.Millisecond || d%time.Millisecond != 0:
		return fmt.Sprintf("duration %v is not a positive whole number of milliseconds", d)
	case len(c.Workspace) > MaxFieldBytes, len(c.Namespace) > MaxFieldBytes, len(c.Identifier) > MaxFieldBytes:
		return fmt.Sprintf("an identity field is longer than %d bytes", MaxFieldBytes)
	}
	return ""
}

// checkRegion reports why region cannot be stored, wrapped in
// ErrInvalidInput.
func checkRegion(region string) error {
	if len(region) > MaxRegionBytes {
		return fmt.Errorf("%w: region is longer than %d bytes", ErrInvalidInput, MaxRegionBytes)
	}
	return nil
}

// skips counts the rows a call leaves out because they cannot be stored.
type skips struct {
	n     int
	first string
}

func (s *skips) add(problem string) {
	if s.n == 0 {
		s.first = problem
	}
	s.n++
}

// err returns nil, or an error wrapping ErrInvalidInput that says how many
// rows were left out and why the first was.
func (s skips) err() error {
	if s.n == 0 {
		return nil
	}
	return fmt.Errorf("%w: %d rows not written (the first: %s)", ErrInvalidInput, s.n, s.first)
}

// cellOf rebuilds a cell from its stored columns.
func cellOf(workspace, namespace, identifier []byte, durationMS, seq int64) origin.Cell {
	return origin.Cell{
		Key: origin.Key{
			Workspace:  string(workspace),
			Namespace:  string(namespace),
			Identifier: string(identifier),
			Duration:   time.Duration(durationMS) * time.Millisecond,
		},
		Sequence: seq,
	}
}
