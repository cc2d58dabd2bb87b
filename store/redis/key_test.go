package redis

import (
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// slotTag is the part of key Redis Cluster hashes: the text between the
// first '{' and the first '}' after it, when not empty; else the whole key.
func slotTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	end := strings.IndexByte(key[open+1:], '}')
	if end <= 0 {
		return key
	}
	return key[open+1 : open+1+end]
}

// TestWorkspaceKeysShareOneSlot checks, for workspaces that contain key
// syntax, that all keys of a workspace hash to the same Cluster slot (the
// write scripts and the snapshot rely on it) and that no two workspaces
// share a key.
func TestWorkspaceKeysShareOneSlot(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	s, err := New(Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, ws := range []string{"", "acme", "{", "}", "a}b", "{x}", "3:abc", "abc:ns", "\x00", "ü"} {
		t.Run(ws, func(t *testing.T) {
			k := s.keysOf(ws)
			keys := []string{k.namespaces(), k.nsIDs(), k.overrides(), k.index("rlns_1"), k.index("{}")}
			tag := slotTag(keys[0])
			if len(tag) != 16 || strings.ContainsAny(tag, "{}") {
				t.Fatalf("tag %q of %q is not 16 hex digits", tag, keys[0])
			}
			for _, key := range keys {
				if got := slotTag(key); got != tag {
					t.Fatalf("key %q hashes %q, not the workspace's tag %q", key, got, tag)
				}
				if other, dup := seen[key]; dup {
					t.Fatalf("workspaces %q and %q share key %q", other, ws, key)
				}
				seen[key] = ws
			}
		})
	}
}

func TestOverrideFieldRoundTrip(t *testing.T) {
	for _, tc := range []struct{ name, nsID, identifier string }{
		{"plain", "rlns_abc", "user_1"},
		{"colons", "a:b", ":x:"},
		{"empty identifier", "rlns_abc", ""},
		{"digits", "12", "3:4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns, id, ok := splitOverrideField(overrideField(tc.nsID, tc.identifier))
			if !ok || ns != tc.nsID || id != tc.identifier {
				t.Fatalf("got (%q, %q, %v)", ns, id, ok)
			}
		})
	}
	for _, bad := range []string{"", "x", "5:ab:c", "2:abc", "-1::"} {
		if _, _, ok := splitOverrideField(bad); ok {
			t.Errorf("splitOverrideField(%q) accepted", bad)
		}
	}
}
