package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/sluicehq/sluice/httplimit"
)

var proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}

func TestClientIP(t *testing.T) {
	const xff, fwd = httplimit.XForwardedFor, httplimit.Forwarded
	tests := []struct {
		name    string
		trusted []netip.Prefix
		header  httplimit.ForwardingHeader
		peer    string
		xff     []string // X-Forwarded-For lines
		fwd     []string // Forwarded lines
		want    string
	}{
		{"no trusted proxy: the header is ignored", nil, xff, "203.0.113.7:5000", []string{"198.51.100.1"}, nil, "203.0.113.7"},
		{"untrusted peer spoofing X-Forwarded-For", proxies, xff, "203.0.113.7:5000", []string{"198.51.100.1"}, nil, "203.0.113.7"},
		{"untrusted peer spoofing Forwarded", proxies, fwd, "203.0.113.7:5000", nil, []string{"for=198.51.100.1"}, "203.0.113.7"},
		{"one trusted proxy", proxies, xff, "10.0.0.1:5000", []string{"198.51.100.1"}, nil, "198.51.100.1"},
		{"the client's own prefix is skipped", proxies, xff, "10.0.0.1:5000", []string{"6.6.6.6, 198.51.100.1"}, nil, "198.51.100.1"},
		{"two trusted proxies", proxies, xff, "10.0.0.1:5000", []string{"6.6.6.6, 198.51.100.1, 10.0.0.2"}, nil, "198.51.100.1"},
		{"a client claiming to be a proxy", proxies, xff, "10.0.0.1:5000", []string{"10.9.9.9, 198.51.100.1"}, nil, "198.51.100.1"},
		{"hops over several lines", proxies, xff, "10.0.0.1:5000", []string{"6.6.6.6", "198.51.100.1"}, nil, "198.51.100.1"},
		{"the client's garbage is never reached", proxies, xff, "10.0.0.1:5000", []string{"garbage, 198.51.100.1"}, nil, "198.51.100.1"},
		{"a trusted proxy's hop is garbage: that proxy", proxies, xff, "10.0.0.1:5000", []string{"198.51.100.1, garbage"}, nil, "10.0.0.1"},
		{"an empty hop: that proxy", proxies, xff, "10.0.0.1:5000", []string{"198.51.100.1,"}, nil, "10.0.0.1"},
		{"a trusted proxy without the header", proxies, xff, "10.0.0.1:5000", nil, nil, "10.0.0.1"},
		{"every hop trusted: the leftmost", proxies, xff, "10.0.0.1:5000", []string{"10.0.0.3, 10.0.0.2"}, nil, "10.0.0.3"},
		{"ports and brackets", proxies, xff, "10.0.0.1:5000", []string{"[2001:db8::1]:443"}, nil, "2001:db8::1"},
		{"address and port", proxies, xff, "10.0.0.1:5000", []string{"198.51.100.1:5555"}, nil, "198.51.100.1"},
		{"a zone is not an address", proxies, xff, "10.0.0.1:5000", []string{"fe80::1%eth0"}, nil, "10.0.0.1"},
		{"IPv4-mapped peer", proxies, xff, "[::ffff:10.0.0.1]:5000", []string{"198.51.100.1"}, nil, "198.51.100.1"},
		{"IPv4-mapped hop", proxies, xff, "10.0.0.1:5000", []string{"::ffff:198.51.100.1"}, nil, "198.51.100.1"},
		{"IPv6 proxy", proxies, xff, "[2001:db8:ffff::5]:5000", []string{"2001:db8:1::9"}, nil, "2001:db8:1::9"},
		{"Forwarded chosen, X-Forwarded-For spoofed", proxies, fwd, "10.0.0.1:5000", []string{"6.6.6.6"}, []string{"for=198.51.100.1"}, "198.51.100.1"},
		{"X-Forwarded-For chosen, Forwarded spoofed", proxies, xff, "10.0.0.1:5000", []string{"198.51.100.1"}, []string{"for=6.6.6.6"}, "198.51.100.1"},
		{"Forwarded: quoted IPv6 with a port", proxies, fwd, "10.0.0.1:5000", nil, []string{`for="[2001:db8::17]:4711"`}, "2001:db8::17"},
		{"Forwarded: other parameters", proxies, fwd, "10.0.0.1:5000", nil, []string{"for=192.0.2.60;proto=http;by=203.0.113.43"}, "192.0.2.60"},
		{"Forwarded: parameter names are case-insensitive", proxies, fwd, "10.0.0.1:5000", nil, []string{"For=192.0.2.60"}, "192.0.2.60"},
		{"Forwarded: escapes in a quoted string", proxies, fwd, "10.0.0.1:5000", nil, []string{`for="192.0.2\.60"`}, "192.0.2.60"},
		{"Forwarded: unquoted IPv6, taken", proxies, fwd, "10.0.0.1:5000", nil, []string{"for=[2001:db8::17]"}, "2001:db8::17"},
		{"Forwarded: the client's unterminated quote cannot swallow the proxy's element", proxies, fwd, "10.0.0.1:5000", nil, []string{`for="6.6.6.6, for=198.51.100.1`}, "198.51.100.1"},
		{"Forwarded: spoofed elements before the proxy's", proxies, fwd, "10.0.0.1:5000", nil, []string{"for=6.6.6.6, for=10.0.0.7", "for=198.51.100.1;proto=https"}, "198.51.100.1"},
		{"Forwarded: unknown: that proxy", proxies, fwd, "10.0.0.1:5000", nil, []string{"for=198.51.100.1, for=unknown"}, "10.0.0.1"},
		{"Forwarded: obfuscated: that proxy", proxies, fwd, "10.0.0.1:5000", nil, []string{"for=_hidden"}, "10.0.0.1"},
		{"Forwarded: two for parameters: that proxy", proxies, fwd, "10.0.0.1:5000", nil, []string{"for=198.51.100.1;for=6.6.6.6"}, "10.0.0.1"},
		{"Forwarded: no for parameter: that proxy", proxies, fwd, "10.0.0.1:5000", nil, []string{"proto=https"}, "10.0.0.1"},
		{"Forwarded: a malformed pair: that proxy", proxies, fwd, "10.0.0.1:5000", nil, []string{"for 198.51.100.1"}, "10.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.peer
			r.Header["X-Forwarded-For"] = tt.xff
			r.Header["Forwarded"] = tt.fwd
			got, err := httplimit.TrustedProxies{Prefixes: tt.trusted, Header: tt.header}.ClientIP(r)
			if err != nil || got.String() != tt.want {
				t.Errorf("ClientIP = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestKeyFuncs(t *testing.T) {
	tests := []struct {
		name    string
		key     httplimit.KeyFunc
		peer    string
		header  http.Header
		want    string
		wantErr error
	}{
		{"IPv4 whole", httplimit.ClientIP(httplimit.TrustedProxies{}), "198.51.100.1:5000", nil, "198.51.100.1", nil},
		{"IPv6 by its /64", httplimit.ClientIP(httplimit.TrustedProxies{}), "[2001:db8:1:2:3:4:5:6]:5000", nil, "2001:db8:1:2::/64", nil},
		{"a peer without an IP address", httplimit.ClientIP(httplimit.TrustedProxies{}), "@", nil, "", httplimit.ErrNoKey},
		{"header", httplimit.Header("x-api-key"), "198.51.100.1:5000", http.Header{"X-Api-Key": {"key-1"}}, "key-1", nil},
		{"header missing", httplimit.Header("X-API-Key"), "198.51.100.1:5000", nil, "", httplimit.ErrNoKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.peer
			for k, v := range tt.header {
				r.Header[k] = v
			}
			got, err := tt.key(r)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Errorf("key = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// FuzzResolve checks TrustedProxies.Resolve against any header a client can
// send: when a trusted proxy appends the client's real address, that
// address is found whatever came before it, on the same line or on earlier
// ones; and an untrusted peer's headers never count.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"", "6.6.6.6", `for="6.6.6.6`, "for=10.0.0.2, for=unknown", `for="[2001:db8::1]:80";proto=https`, ",,,", `\"`, "10.0.0.2, 10.0.0.3"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	const real = "198.51.100.7"
	f.Fuzz(func(t *testing.T, spoofed string, forwarded bool) {
		tp := httplimit.TrustedProxies{Prefixes: proxies}
		hop := real
		if forwarded {
			tp.Header, hop = httplimit.Forwarded, "for="+real
		}
		proxy, client := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr(real)
		for _, lines := range [][]string{{spoofed + "," + hop}, {spoofed, hop}, {spoofed + ", " + hop, "10.0.0.2"}} {
			if forwarded && len(lines) == 2 && lines[1] == "10.0.0.2" {
				lines[1] = "for=10.0.0.2"
			}
			if got := tp.Resolve(proxy, lines); got != client {
				t.Fatalf("Resolve(%s, %q) = %v, want the appended %v", proxy, lines, got, client)
			}
		}
		untrusted := netip.MustParseAddr("203.0.113.1")
		if got := tp.Resolve(untrusted, []string{spoofed}); got != untrusted {
			t.Fatalf("an untrusted peer's header %q counted: %v", spoofed, got)
		}
		if got := tp.Resolve(proxy, []string{spoofed}); !got.IsValid() {
			t.Fatalf("Resolve(%q) = an invalid address", spoofed)
		}
	})
}
