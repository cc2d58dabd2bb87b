package rls

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// describe renders the rule a match found, for table comparisons: "" for
// none, "unlimited", or "LIMIT/WINDOW" with " shadow" when in shadow mode.
func describe(r *rule) string {
	switch {
	case r == nil:
		return ""
	case r.unlimited:
		return "unlimited"
	case r.shadow:
		return fmt.Sprintf("%d/%v shadow", r.limit, r.window)
	}
	return fmt.Sprintf("%d/%v", r.limit, r.window)
}

// entries parses "k=v,k2=v2".
func entries(s string) []entry {
	var es []entry
	for kv := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		es = append(es, entry{k, v})
	}
	return es
}

func TestMatch(t *testing.T) {
	examples, err := Load("testdata/examples")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		domain  string
		entries string
		want    string
	}{
		{"exact value", "mongo_cps", "database=users", "500/1s"},
		{"another exact value", "mongo_cps", "database=default", "400/1s"},
		{"value not configured and no default", "mongo_cps", "database=orders", ""},
		{"key not configured", "mongo_cps", "table=users", ""},
		{"unknown domain", "nope", "database=users", ""},

		{"default for any value", "edge_proxy_per_ip", "remote_address=10.0.0.1", "10/1s"},
		{"exact value before the default", "edge_proxy_per_ip", "remote_address=50.0.0.5", "0/1s"},

		{"nested default", "messaging", "message_type=marketing,to_number=2061111111", "5/24h0m0s"},
		{"top-level default", "messaging", "to_number=2061111111", "100/24h0m0s"},
		{"placeholder without a rate_limit", "messaging", "message_type=marketing", ""},
		{"nested under an unconfigured value", "messaging", "message_type=transactional,to_number=1", ""},
		{"entries in another order", "messaging", "to_number=1,message_type=marketing", ""},

		{"depth 1", "example4", "key=value", "100/1s"},
		{"depth 2", "example4", "key=value,subkey=anything", "300/1s"},
		{"deeper than configured", "example4", "key=value,subkey=anything,more=x", ""},
		{"first entry differs", "example4", "key=other,subkey=anything", ""},

		{"unlimited", "internal", "ldap=cn", "unlimited"},
		{"limited next to unlimited", "internal", "azure=x", "100/1m0s"},

		{"shadow mode", "example6", "service=auth,user=user-a", "10/1s shadow"},
		{"enforced sibling of a shadow rule", "example6", "service=auth,user=user-b", "20/1s"},
		{"no rule for another user", "example6", "service=auth,user=user-c", ""},

		{"wildcard prefix", "example9", "path=/api/v1/users", "20/1m0s"},
		{"wildcard with an empty rest", "example9", "path=/api/v1/", "20/1m0s"},
		{"exact value before a wildcard", "example9", "path=/api/v1/health", "unlimited"},
		{"default when the prefix differs", "example9", "path=/api/v2/users", "100/1m0s"},

		{"unit_multiplier window", "windows", "client=c1", "30/1m30s"},
		{"month", "windows", "plan=free", "10000/720h0m0s"},
		{"week", "windows", "plan=trial", "700/168h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got *rule
			if dom := examples.domains[tt.domain]; dom != nil {
				got = dom.root.match(entries(tt.entries))
			}
			if describe(got) != tt.want {
				t.Errorf("match(%s, %s) = %q, want %q", tt.domain, tt.entries, describe(got), tt.want)
			}
		})
	}
}

func TestMatchPrecedence(t *testing.T) {
	rs, err := Parse("precedence.yaml", []byte(`
domain: d
descriptors:
  # Wildcards are tried in file order: the first prefix that fits wins.
  - key: w
    value: a*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: w
    value: ab*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: w
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 3}
  # A wildcard only matches its own key.
  - key: other
    value: a*
    rate_limit: {unit: second, requests_per_unit: 4}
  # Matching never backtracks: x=1 has no nested descriptors, so x=1,y=2
  # matches nothing even though the default x has a nested y.
  - key: x
    value: "1"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: x
    descriptors:
      - key: y
        rate_limit: {unit: second, requests_per_unit: 6}
  # "*" inside a value is literal.
  - key: lit
    value: a*b
    rate_limit: {unit: second, requests_per_unit: 7}
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		entries string
		want    string
	}{
		{"w=abc", "1/1s"},
		{"w=a", "1/1s"},
		{"w=b", "3/1s"},
		{"other=abc", "4/1s"},
		{"other=b", ""},
		{"x=1", "5/1s"},
		{"x=1,y=2", ""},
		{"x=2,y=2", "6/1s"},
		{"x=2", ""},
		{"lit=a*b", "7/1s"},
		{"lit=axb", ""},
	}
	for _, tt := range tests {
		t.Run(tt.entries, func(t *testing.T) {
			if got := describe(rs.domains["d"].root.match(entries(tt.entries))); got != tt.want {
				t.Errorf("match(%s) = %q, want %q", tt.entries, got, tt.want)
			}
		})
	}
}

func TestIdentifier(t *testing.T) {
	tests := []struct {
		entries []entry
		want    string
	}{
		{[]entry{{"remote_address", "10.0.0.1"}}, "14:remote_address8:10.0.0.1"},
		{[]entry{{"a", "b"}, {"c", "d"}}, "1:a1:b1:c1:d"},
		{[]entry{{"a:1", "b"}}, "3:a:11:b"},
		{[]entry{{"κ", "ü"}}, "2:κ2:ü"},
	}
	for _, tt := range tests {
		if got := identifier(tt.entries); got != tt.want {
			t.Errorf("identifier(%q) = %q, want %q", tt.entries, got, tt.want)
		}
	}
}

// TestIdentifierInjective checks that distinct entry lists never share a
// counter: the entries can be read back from the identifier.
func TestIdentifierInjective(t *testing.T) {
	// Few, confusable characters make collisions likely if there were any.
	str := rapid.StringOfN(rapid.SampledFrom([]rune{'a', '1', ':', '0', '9', '_', '=', ','}), 0, 12, -1)
	genEntries := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) entry {
		return entry{str.Draw(t, "key"), str.Draw(t, "value")}
	}), 1, 4)
	rapid.Check(t, func(t *rapid.T) {
		a, b := genEntries.Draw(t, "a"), genEntries.Draw(t, "b")
		if identifier(a) == identifier(b) && fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("%q and %q share the identifier %q", a, b, identifier(a))
		}
		if got := decodeIdentifier(t, identifier(a)); fmt.Sprint(got) != fmt.Sprint(a) {
			t.Fatalf("decode(identifier(%q)) = %q", a, got)
		}
	})
}

// decodeIdentifier inverts identifier, proving it injective.
func decodeIdentifier(t *rapid.T, id string) []entry {
	var fields []string
	for id != "" {
		n, rest, ok := strings.Cut(id, ":")
		var size int
		if _, err := fmt.Sscanf(n, "%d", &size); !ok || err != nil || size > len(rest) {
			t.Fatalf("malformed identifier at %q", id)
		}
		fields = append(fields, rest[:size])
		id = rest[size:]
	}
	var es []entry
	for i := 0; i+1 < len(fields); i += 2 {
		es = append(es, entry{fields[i], fields[i+1]})
	}
	return es
}
