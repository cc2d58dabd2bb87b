package cluster

import (
	"encoding/binary"
	"slices"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/origin"
)

// Ring maps counter identities to their owner by rendezvous (highest random
// weight) hashing: every member scores every identity and the highest score
// owns it. When a member joins it takes only the identities it now scores
// highest on; when one leaves, only its identities move, each to its
// runner-up. A Ring is immutable and safe for concurrent use; membership
// changes build a new one.
type Ring struct {
	ids    []string // sorted member ids
	hashes []uint64 // xxhash of each id
}

// NewRing returns the ring of members ids (duplicates are ignored).
func NewRing(ids ...string) *Ring {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	r := &Ring{ids: sorted, hashes: make([]uint64, len(sorted))}
	for i, id := range sorted {
		r.hashes[i] = xxhash.Sum64String(id)
	}
	return r
}

// Members returns the member ids in sorted order.
func (r *Ring) Members() []string { return slices.Clone(r.ids) }

// Len returns the number of members.
func (r *Ring) Len() int { return len(r.ids) }

// Has reports whether id is a member.
func (r *Ring) Has(id string) bool {
	_, ok := slices.BinarySearch(r.ids, id)
	return ok
}

// Owner returns the member that owns key, or "" for an empty ring.
func (r *Ring) Owner(key origin.Key) string {
	return r.ownerOf(KeyHash(key))
}

// ownerSkipping returns the member with the highest score for h among
// those not in skip; if skip holds every member, the owner.
func (r *Ring) ownerSkipping(h uint64, skip map[string]bool) string {
	if len(skip) == 0 {
		return r.ownerOf(h)
	}
	best, owner := uint64(0), ""
	for i, mh := range r.hashes {
		if skip[r.ids[i]] {
			continue
		}
		if s := score(h, mh); owner == "" || s > best {
			best, owner = s, r.ids[i]
		}
	}
	if owner == "" {
		return r.ownerOf(h)
	}
	return owner
}

func (r *Ring) ownerOf(h uint64) string {
	best, owner := uint64(0), ""
	for i, mh := range r.hashes {
		if s := score(h, mh); owner == "" || s > best {
			best, owner = s, r.ids[i]
		}
	}
	return owner
}

// score is the weight of a member for an identity: a splitmix64 finaliser of
// both hashes, so that every member's scores are independent.
func score(key, member uint64) uint64 {
	x := key ^ (member * 0x9e3779b97f4a7c15)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// KeyHash is the xxhash of a counter identity. Each string is prefixed with
// its length and the duration is a fixed 8 bytes, so two different
// identities never hash the same bytes (moving a character from the
// namespace to the identifier changes the input).
func KeyHash(k origin.Key) uint64 {
	var d xxhash.Digest
	d.Reset()
	var buf [binary.MaxVarintLen64]byte
	for _, s := range [...]string{k.Workspace, k.Namespace, k.Identifier} {
		_, _ = d.Write(buf[:binary.PutUvarint(buf[:], uint64(len(s)))])
		_, _ = d.WriteString(s)
	}
	_, _ = d.Write(binary.BigEndian.AppendUint64(buf[:0], uint64(k.Duration.Milliseconds())))
	return d.Sum64()
}
