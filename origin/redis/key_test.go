package redis

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/origin"
)

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster uses for key slots.
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc ^= uint16(b[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// clusterHashPart returns the part of key Redis Cluster hashes: the content
// of the first {...} after the first '{' if it is non-empty, else the key.
func clusterHashPart(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// clusterSlot implements the Redis Cluster key → slot rule.
func clusterSlot(key string) int { return int(crc16(clusterHashPart(key)) % 16384) }

func TestClusterSlotReference(t *testing.T) {
	// Vectors from the Redis Cluster specification.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for _, tc := range []struct{ key, hashed string }{
		{"{user1000}.following", "user1000"},
		{"{user1000}.followers", "user1000"},
		{"foo{}{bar}", "foo{}{bar}"}, // empty tag: the whole key
		{"foo{{bar}}zap", "{bar"},
		{"foo{bar}{zap}", "bar"},
		{"nobraces", "nobraces"},
	} {
		if got := clusterHashPart(tc.key); got != tc.hashed {
			t.Errorf("hash part of %q = %q, want %q", tc.key, got, tc.hashed)
		}
	}
}

// decodeCellKey parses a CellKey back into its cell; it proves the encoding
// injective (a function with a left inverse is injective).
func decodeCellKey(key string) (origin.Cell, error) {
	var c origin.Cell
	rest, ok := strings.CutPrefix(key, KeyPrefix+":{")
	if !ok || len(rest) < tagLen+2 || rest[tagLen:tagLen+2] != "}:" {
		return c, errors.New("bad prefix")
	}
	tag := rest[:tagLen]
	rest = rest[tagLen+2:]
	identityStart := rest
	var fields [3]string
	for i := range fields {
		n, after, ok := strings.Cut(rest, ":")
		if !ok {
			return c, errors.New("missing length")
		}
		l, err := strconv.Atoi(n)
		if err != nil || l < 0 || l+1 > len(after) || after[l] != ':' {
			return c, errors.New("bad length")
		}
		fields[i], rest = after[:l], after[l+1:]
	}
	d, seq, ok := strings.Cut(rest, ":")
	if !ok {
		return c, errors.New("missing sequence")
	}
	identity := identityStart[:len(identityStart)-len(seq)-1]
	if ns, isNs := strings.CutSuffix(d, "ns"); isNs {
		v, err := strconv.ParseInt(ns, 10, 64)
		if err != nil {
			return c, err
		}
		c.Duration = time.Duration(v)
	} else {
		v, err := strconv.ParseInt(d, 10, 64)
		if err != nil {
			return c, err
		}
		c.Duration = time.Duration(v) * time.Millisecond
	}
	s, err := strconv.ParseInt(seq, 10, 64)
	if err != nil {
		return c, err
	}
	c.Workspace, c.Namespace, c.Identifier, c.Sequence = fields[0], fields[1], fields[2], s
	if HashTag(c.Key) != tag || fmt.Sprintf("%016x", fnv1a([]byte(identity))) != tag {
		return c, errors.New("tag does not match identity")
	}
	return c, nil
}

func TestCellKey(t *testing.T) {
	k := origin.Key{Workspace: "acme", Namespace: "api", Identifier: "alice", Duration: time.Minute}
	tests := []struct {
		name string
		cell origin.Cell
		want string // "" = only check structure
	}{
		{"plain", origin.Cell{Key: k, Sequence: 29000000}, "sl2:{" + HashTag(k) + "}:4:acme:3:api:5:alice:60000:29000000"},
		{"empty workspace", origin.Cell{Key: origin.Key{Namespace: "n", Identifier: "i", Duration: time.Second}, Sequence: 1}, "sl2:{" + HashTag(origin.Key{Namespace: "n", Identifier: "i", Duration: time.Second}) + "}:0::1:n:1:i:1000:1"},
		{"negative sequence", origin.Cell{Key: k, Sequence: -1}, "sl2:{" + HashTag(k) + "}:4:acme:3:api:5:alice:60000:-1"},
		{"braces", origin.Cell{Key: origin.Key{Workspace: "}", Namespace: "{", Identifier: "{}", Duration: time.Millisecond}}, ""},
		{"colons", origin.Cell{Key: origin.Key{Workspace: "a:1:", Namespace: ":", Identifier: "::", Duration: time.Hour}, Sequence: 7}, ""},
		{"nul and invalid utf-8", origin.Cell{Key: origin.Key{Workspace: "\x00", Namespace: "\xff\xfe", Identifier: "a\x00b", Duration: 2 * time.Millisecond}, Sequence: 3}, ""},
		{"sub-millisecond duration", origin.Cell{Key: origin.Key{Namespace: "n", Identifier: "i", Duration: 1500 * time.Microsecond}}, ""},
	}
	// Golden value: the layout is persistent; changing it needs a new prefix.
	if got, want := CellKey(origin.Cell{Key: k, Sequence: 29000000}), "sl2:{5a3e96f0cd3ea96b}:4:acme:3:api:5:alice:60000:29000000"; got != want {
		t.Fatalf("CellKey = %q, want %q (the key layout changed: bump KeyPrefix)", got, want)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CellKey(tc.cell)
			if tc.want != "" && got != tc.want {
				t.Fatalf("CellKey = %q, want %q", got, tc.want)
			}
			back, err := decodeCellKey(got)
			if err != nil || back != tc.cell {
				t.Fatalf("decode(%q) = %+v, %v; want %+v", got, back, err, tc.cell)
			}
			if part := clusterHashPart(got); part != HashTag(tc.cell.Key) {
				t.Fatalf("cluster hashes %q, want the tag %q", part, HashTag(tc.cell.Key))
			}
			prev := tc.cell
			prev.Sequence--
			if clusterSlot(got) != clusterSlot(CellKey(prev)) {
				t.Fatalf("cells %d and %d are in different slots", tc.cell.Sequence, prev.Sequence)
			}
		})
	}
}

// TestCellKeyNoCollisions checks pairs that naive encodings (a separator
// without lengths, a tag taken from the identity) would confuse.
func TestCellKeyNoCollisions(t *testing.T) {
	keys := []origin.Key{
		{Workspace: "a:b", Namespace: "c", Identifier: "d", Duration: time.Second},
		{Workspace: "a", Namespace: "b:c", Identifier: "d", Duration: time.Second},
		{Workspace: "a", Namespace: "b", Identifier: "c:d", Duration: time.Second},
		{Workspace: "", Namespace: "a:b:c", Identifier: "d", Duration: time.Second},
		{Workspace: "1:a", Namespace: "b", Identifier: "c", Duration: time.Second},
		{Workspace: "a}", Namespace: "b", Identifier: "c", Duration: time.Second},
		{Workspace: "a", Namespace: "}b", Identifier: "c", Duration: time.Second},
		{Workspace: "a", Namespace: "b", Identifier: "c", Duration: time.Millisecond},
		{Workspace: "a", Namespace: "b", Identifier: "c", Duration: time.Microsecond},
		{Workspace: "a", Namespace: "b", Identifier: "c:1000", Duration: time.Second},
	}
	seen := map[string]origin.Cell{}
	for _, k := range keys {
		for seq := int64(-1); seq <= 1; seq++ {
			c := origin.Cell{Key: k, Sequence: seq}
			key := CellKey(c)
			if other, dup := seen[key]; dup {
				t.Fatalf("%+v and %+v share key %q", other, c, key)
			}
			seen[key] = c
		}
	}
}

func FuzzCellKeyInjective(f *testing.F) {
	f.Add("ws", "ns", "id", int64(60000), int64(5), "ws", "ns", "id", int64(60000), int64(4))
	f.Add("", "{", "}", int64(1), int64(0), "", "", "{}", int64(1), int64(0))
	f.Add("a:b", "c", "d", int64(1000), int64(1), "a", "b:c", "d", int64(1000), int64(1))
	f.Add("\x00", "\xff\xfe", "a\x00b", int64(2), int64(-1), "\x00\xff", "\xfe", "a\x00b", int64(2), int64(-1))
	f.Add("}{", "x}", "{y", int64(86400000), int64(19000), "}{x", "}", "{y", int64(86400000), int64(19000))
	f.Add("1:a", "b", "c", int64(1), int64(1), "", "1:a:1:b", "c", int64(1), int64(1))
	f.Fuzz(func(t *testing.T, ws1, ns1, id1 string, d1, s1 int64, ws2, ns2, id2 string, d2, s2 int64) {
		c1 := origin.Cell{Key: origin.Key{Workspace: ws1, Namespace: ns1, Identifier: id1, Duration: time.Duration(d1) * time.Millisecond}, Sequence: s1}
		c2 := origin.Cell{Key: origin.Key{Workspace: ws2, Namespace: ns2, Identifier: id2, Duration: time.Duration(d2)}, Sequence: s2}
		k1, k2 := CellKey(c1), CellKey(c2)
		if (c1 == c2) != (k1 == k2) {
			t.Fatalf("cells %+v and %+v: keys %q and %q", c1, c2, k1, k2)
		}
		for _, c := range []origin.Cell{c1, c2} {
			key := CellKey(c)
			back, err := decodeCellKey(key)
			if err != nil || back != c {
				t.Fatalf("decode(%q) = %+v, %v; want %+v", key, back, err, c)
			}
			if part := clusterHashPart(key); part != HashTag(c.Key) {
				t.Fatalf("key %q: cluster hashes %q, want tag %q", key, part, HashTag(c.Key))
			}
			prev := c
			prev.Sequence--
			if clusterSlot(key) != clusterSlot(CellKey(prev)) {
				t.Fatalf("cells of %+v at %d and %d are in different slots", c.Key, c.Sequence, prev.Sequence)
			}
		}
	})
}

func BenchmarkCellKey(b *testing.B) {
	c := origin.Cell{Key: origin.Key{Workspace: "acme", Namespace: "api.requests", Identifier: "user_2Xy9Lq8NmP", Duration: time.Minute}, Sequence: 29000000}
	b.ReportAllocs()
	for b.Loop() {
		_ = CellKey(c)
	}
}
