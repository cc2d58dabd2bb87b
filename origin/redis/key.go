package redis

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// KeyPrefix is the version prefix of every key this package writes. A future
// change of the key layout gets a new prefix, so old and new layouts never
// read each other's cells.
const KeyPrefix = "sl2"

// tagLen is the number of hex digits of the hash tag.
const tagLen = 16

// CellKey returns the Redis key of cell c:
//
//	sl2:{<tag>}:<len(ws)>:<ws>:<len(ns)>:<ns>:<len(id)>:<id>:<duration>:<seq>
//
// where the lengths are decimal byte counts, <duration> is the duration in
// whole milliseconds (or in nanoseconds with an "ns" suffix when it is not a
// whole number of milliseconds, which the origin contract rules out), <seq> is
// the decimal, possibly negative, sequence, and <tag> is [HashTag] of c.Key.
//
// The encoding is injective: the part after the tag is length-prefixed, so it
// can be decoded back into (workspace, namespace, identifier, duration,
// sequence) whatever bytes the strings hold ('{', '}', ':', NUL, invalid
// UTF-8). The tag holds only hex digits, so Redis Cluster always hashes exactly
// the tag: both cells of one identity share a slot, whatever the identity.
//
// CellKey is a pure function, safe for concurrent use.
func CellKey(c origin.Cell) string {
	var stack [96]byte
	id := appendIdentity(stack[:0], c.Key)
	var b strings.Builder
	b.Grow(len(KeyPrefix) + 2 + tagLen + 2 + len(id) + 1 + 20)
	b.WriteString(KeyPrefix)
	b.WriteString(":{")
	writeTag(&b, fnv1a(id))
	b.WriteString("}:")
	b.Write(id)
	b.WriteByte(':')
	var num [20]byte
	b.Write(strconv.AppendInt(num[:0], c.Sequence, 10))
	return b.String()
}

// HashTag returns the Redis Cluster hash tag of key (without braces): 16
// lowercase hex digits of the 64-bit FNV-1a hash of key's length-prefixed
// encoding. Every cell of key carries it, so every cell of key lives in one
// slot. Distinct keys may share a tag; their cell keys still differ.
func HashTag(key origin.Key) string {
	var stack [96]byte
	var b strings.Builder
	b.Grow(tagLen)
	writeTag(&b, fnv1a(appendIdentity(stack[:0], key)))
	return b.String()
}

// appendIdentity appends the length-prefixed encoding of key:
// <len>:<ws>:<len>:<ns>:<len>:<id>:<duration>.
func appendIdentity(b []byte, k origin.Key) []byte {
	for _, s := range [...]string{k.Workspace, k.Namespace, k.Identifier} {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
		b = append(b, ':')
	}
	if k.Duration%time.Millisecond == 0 {
		b = strconv.AppendInt(b, k.Duration.Milliseconds(), 10)
	} else {
		b = strconv.AppendInt(b, int64(k.Duration), 10)
		b = append(b, "ns"...)
	}
	return b
}

// fnv1a is the 64-bit FNV-1a hash.
func fnv1a(b []byte) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for _, c := range b {
		h ^= uint64(c)
		h *= prime
	}
	return h
}

func writeTag(b *strings.Builder, h uint64) {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		b.WriteByte(digits[(h>>uint(shift))&0xf])
	}
}
