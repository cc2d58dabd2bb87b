package mysql

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/global"
	"github.com/sluicehq/sluice/origin"
)

// A batch is one stored row of counts: many cells' counts of one region,
// written by one Publish, encoded in its payload column. A row of the
// batches table is append-only; a cell's entry of a region is the highest
// count any row of that region carries for it (the G-Counter's max), so a
// later row supersedes the cells it repeats and nothing is ever updated in
// place. See docs/global-mysql.md.
//
// The payload is a version byte (batchFormat), the number of cells (a
// uvarint), then the cells in the order of compareCells, each:
//
//	flags        1 byte: flagWorkspace, flagNamespace, flagDuration
//	workspace    uvarint length, bytes     (if flagWorkspace)
//	namespace    uvarint length, bytes     (if flagNamespace)
//	duration_ms  uvarint                   (if flagDuration)
//	identifier   uvarint bytes shared with the previous cell's identifier,
//	             uvarint length of the rest, the rest
//	seq          zigzag varint, the difference from the previous cell's
//	count        uvarint, at least 1
//
// A field left out is the previous cell's; the first cell carries them
// all. Sorted cells share their workspace, namespace and duration with
// their neighbours and most of their identifier, so a cell of a typical
// key takes 10-20 bytes.
const batchFormat = 1

const (
	flagWorkspace = 1 << iota
	flagNamespace
	flagDuration
	flagsAll = flagWorkspace | flagNamespace | flagDuration
)

// maxCellBytes bounds the encoding of one cell: the three fields at
// MaxFieldBytes with their lengths, and the integers.
const maxCellBytes = 1 + 3*(MaxFieldBytes+binary.MaxVarintLen64) + 4*binary.MaxVarintLen64

// errBadBatch reports a payload that does not decode (a row this package did
// not write, or a newer format).
var errBadBatch = errors.New("global/mysql: undecodable batch row")

// batch is one row to write: its payload, the cells it carries, and the
// latest expiry among them.
type batch struct {
	payload   []byte
	cells     int
	expiresAt int64
}

// compareCells orders cells by workspace, namespace, duration, identifier,
// then sequence: the order of a batch's payload.
func compareCells(a, b origin.Cell) int {
	return cmp.Or(
		strings.Compare(a.Workspace, b.Workspace),
		strings.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Duration, b.Duration),
		strings.Compare(a.Identifier, b.Identifier),
		cmp.Compare(a.Sequence, b.Sequence))
}

// packBatches encodes counts, sorted by compareCells with one count per
// cell, into rows of at most perRow cells each.
func packBatches(counts []global.Count, perRow int) []batch {
	out := make([]batch, 0, (len(counts)+perRow-1)/perRow)
	for chunk := range slices.Chunk(counts, perRow) {
		out = append(out, encodeBatch(chunk))
	}
	return out
}

// encodeBatch encodes counts (sorted, one per cell) as one row.
func encodeBatch(counts []global.Count) batch {
	b := batch{cells: len(counts), payload: make([]byte, 0, 16+16*len(counts)), expiresAt: math.MinInt64}
	b.payload = append(b.payload, batchFormat)
	b.payload = binary.AppendUvarint(b.payload, uint64(len(counts)))
	var prev origin.Cell
	for i, n := range counts {
		c := n.Cell
		flags := byte(0)
		if i == 0 {
			flags = flagsAll
		} else {
			flags = flagIf(c.Workspace != prev.Workspace, flagWorkspace) |
				flagIf(c.Namespace != prev.Namespace, flagNamespace) |
				flagIf(c.Duration != prev.Duration, flagDuration)
		}
		p := b.payload
		p = append(p, flags)
		if flags&flagWorkspace != 0 {
			p = appendString(p, c.Workspace)
		}
		if flags&flagNamespace != 0 {
			p = appendString(p, c.Namespace)
		}
		if flags&flagDuration != 0 {
			p = binary.AppendUvarint(p, uint64(c.Duration.Milliseconds()))
		}
		shared := sharedPrefix(prev.Identifier, c.Identifier)
		p = binary.AppendUvarint(p, uint64(shared))
		p = appendString(p, c.Identifier[shared:])
		p = binary.AppendVarint(p, c.Sequence-prev.Sequence)
		b.payload = binary.AppendUvarint(p, uint64(n.Count))
		b.expiresAt = max(b.expiresAt, n.ExpiresAt)
		prev = c
	}
	return b
}

func flagIf(ok bool, flag byte) byte {
	if ok {
		return flag
	}
	return 0
}

func appendString(p []byte, s string) []byte {
	return append(binary.AppendUvarint(p, uint64(len(s))), s...)
}

// sharedPrefix returns the length of the longest common prefix of a and b.
func sharedPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// batchDecoder reads a payload, a field at a time; the first failure sticks.
type batchDecoder struct {
	p   []byte
	err error
}

func (d *batchDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{errBadBatch}, args...)...)
	}
}

// uvarint reads an unsigned varint.
func (d *batchDecoder) uvarint() uint64 { return number(d, binary.Uvarint) }

// varint reads a zigzag varint.
func (d *batchDecoder) varint() int64 { return number(d, binary.Varint) }

// number reads a number with read (binary.Uvarint or binary.Varint).
func number[T uint64 | int64](d *batchDecoder, read func([]byte) (T, int)) T {
	v, n := read(d.p)
	if n <= 0 {
		d.fail("a number is cut short or overflows")
		d.p = nil
		return 0
	}
	d.p = d.p[n:]
	return v
}

// bytes reads n bytes, at most limit.
func (d *batchDecoder) bytes(n uint64, limit int) []byte {
	if n > uint64(limit) || n > uint64(len(d.p)) {
		d.fail("a field of %d bytes is over %d or past the payload's end", n, limit)
		d.p = nil
		return nil
	}
	out := d.p[:n]
	d.p = d.p[n:]
	return out
}

// decodeBatch calls yield with each cell's count of payload whose cell is
// still active at now ((Sequence+2) × Duration after the epoch, as Publish's
// callers compute ExpiresAt), in payload order. It returns errBadBatch,
// wrapped, for a payload it cannot read to its end; the cells before the
// fault have been yielded.
func decodeBatch(payload []byte, now int64, yield func(origin.Cell, int64)) error {
	if len(payload) == 0 || payload[0] != batchFormat {
		return fmt.Errorf("%w: not format %d", errBadBatch, batchFormat)
	}
	d := batchDecoder{p: payload[1:]}
	n := d.uvarint()
	if n > uint64(len(d.p)) { // every cell takes 4 bytes at least
		d.fail("%d cells in %d bytes", n, len(d.p))
	}
	var c origin.Cell
	for i := uint64(0); i < n && d.err == nil; i++ {
		flags := d.bytes(1, 1)
		if d.err != nil || (i == 0 && flags[0] != flagsAll) || flags[0]&^flagsAll != 0 {
			d.fail("cell %d has flags %v", i, flags)
			break
		}
		if flags[0]&flagWorkspace != 0 {
			c.Workspace = string(d.bytes(d.uvarint(), MaxFieldBytes))
		}
		if flags[0]&flagNamespace != 0 {
			c.Namespace = string(d.bytes(d.uvarint(), MaxFieldBytes))
		}
		if flags[0]&flagDuration != 0 {
			ms := d.uvarint()
			if ms == 0 || ms > uint64(maxDurationMS) {
				d.fail("cell %d has duration %d ms", i, ms)
			}
			c.Duration = time.Duration(ms) * time.Millisecond
		}
		shared := d.uvarint()
		if shared > uint64(len(c.Identifier)) {
			d.fail("cell %d shares %d bytes of a %d-byte identifier", i, shared, len(c.Identifier))
			break
		}
		rest := d.bytes(d.uvarint(), MaxFieldBytes-int(shared))
		c.Identifier = c.Identifier[:shared] + string(rest)
		c.Sequence += d.varint()
		count := d.uvarint()
		if d.err == nil && (count == 0 || count > math.MaxInt64) {
			d.fail("cell %d has count %d", i, count)
		}
		if d.err == nil && cellExpiresAt(c) > now {
			yield(c, int64(count))
		}
	}
	if d.err == nil && len(d.p) != 0 {
		d.fail("%d bytes after the last cell", len(d.p))
	}
	return d.err
}

// maxDurationMS bounds a decoded duration so that time.Duration does not
// overflow: about 292 years.
const maxDurationMS = int64(1<<63-1) / int64(time.Millisecond)

// cellExpiresAt is (Sequence+2) × Duration in Unix ms, saturated.
func cellExpiresAt(c origin.Cell) int64 {
	ms := c.Duration.Milliseconds()
	if ms <= 0 {
		return 0
	}
	switch {
	case c.Sequence > (1<<62)/ms:
		return 1<<63 - 1
	case c.Sequence < -(1<<62)/ms:
		return 0
	}
	return (c.Sequence + 2) * ms
}
