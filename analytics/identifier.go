package analytics

import (
	"fmt"
	"hash/crc64"
	"unicode/utf8"
)

// MaxIdentifierBytes bounds an identifier as the analytics keep it, in
// their top lists and in what nodes share. A longer identifier (Envoy RLS
// counter identifiers reach 8,256 bytes) is kept as its first bytes, cut
// at a character boundary, then "…" and the 16 hex digits of the CRC-64
// (ECMA) of the whole identifier: at most MaxIdentifierBytes in all, the
// same on every node, and distinct for identifiers that differ only past
// the cut (but for a CRC collision).
const MaxIdentifierBytes = 512

// clipMark separates a clipped identifier's first bytes from its hash.
const clipMark = "…"

var crcTable = crc64.MakeTable(crc64.ECMA)

// clip returns id as the analytics keep it: id itself if it fits in
// MaxIdentifierBytes, else its clipped form (see MaxIdentifierBytes).
func clip(id string) string {
	if len(id) <= MaxIdentifierBytes {
		return id
	}
	cut := MaxIdentifierBytes - len(clipMark) - 16
	for cut > 0 && !utf8.RuneStart(id[cut]) {
		cut--
	}
	b := make([]byte, 0, MaxIdentifierBytes)
	b = append(b, id[:cut]...)
	b = append(b, clipMark...)
	return string(fmt.Appendf(b, "%016x", crc64.Checksum([]byte(id), crcTable)))
}
