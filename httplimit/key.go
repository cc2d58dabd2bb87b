package httplimit

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// KeyFunc returns the key of a request: who is limited, e.g. a client IP,
// an API key or a user id. An error refuses the request (400), and so does
// an empty key: a client must not escape its limit by withholding its key.
type KeyFunc func(r *http.Request) (string, error)

// Header keys requests by the value of the named header; a request
// without it has no key ([ErrNoKey]).
func Header(name string) KeyFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("%w: no %s header", ErrNoKey, name)
		}
		return v, nil
	}
}

// ClientIP keys requests by the client's IP address, as tp.ClientIP finds
// it: an IPv4 address whole, an IPv6 address by its /64, the block a single
// host or subscriber is typically given. (For whole IPv6 addresses, write a
// KeyFunc around tp.ClientIP.)
func ClientIP(tp TrustedProxies) KeyFunc {
	return func(r *http.Request) (string, error) {
		a, err := tp.ClientIP(r)
		if err != nil {
			return "", err
		}
		if a.Is4() {
			return a.String(), nil
		}
		p, _ := a.Prefix(64) // cannot fail: a is IPv6
		return p.String(), nil
	}
}

// ForwardingHeader names the header through which proxies tell the address
// of the client they forward.
type ForwardingHeader int

const (
	// XForwardedFor is X-Forwarded-For: comma-separated addresses, each
	// proxy appending its peer's.
	XForwardedFor ForwardingHeader = iota
	// Forwarded is RFC 7239's Forwarded: comma-separated elements whose
	// "for" parameter is the address, each proxy appending one.
	Forwarded
)

// name is the header's canonical name.
func (h ForwardingHeader) name() string {
	if h == Forwarded {
		return "Forwarded"
	}
	return "X-Forwarded-For"
}

// TrustedProxies says whose forwarding header counts. Every proxy of a
// chain appends the address of the peer it received the request from; the
// client can write anything before that. So only the hops that trusted
// proxies appended count, read from the right: the client is the first
// address, from the right, that is not a trusted proxy.
type TrustedProxies struct {
	// Prefixes are the addresses of the proxies in front of the service.
	// Empty: none; the peer of the connection is the client and
	// forwarding headers are ignored.
	Prefixes []netip.Prefix
	// Header is the one header the proxies write. The other is ignored:
	// a client could send it, and the proxies would pass it on unchanged.
	Header ForwardingHeader
}

// trusts reports whether a is the address of a trusted proxy.
func (tp TrustedProxies) trusts(a netip.Addr) bool {
	for _, p := range tp.Prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP returns the address of r's client: the peer of the connection
// (r.RemoteAddr) unless it is a trusted proxy, in which case the hops of
// tp.Header are read from the right while they are trusted proxies (see
// [TrustedProxies.Resolve]). An error wraps [ErrNoKey]: the peer's address
// is not an IP address (a Unix socket).
func (tp TrustedProxies) ClientIP(r *http.Request) (netip.Addr, error) {
	host := r.RemoteAddr
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: the peer address %q is not an IP address", ErrNoKey, r.RemoteAddr)
	}
	return tp.Resolve(peer, r.Header.Values(tp.Header.name())), nil
}

// Resolve returns the client's address given the connection's peer and
// the field lines of tp.Header, in the order received. While the address
// at hand is a trusted proxy, the hop it appended (the next one from the
// right) is its peer; the first address that is not trusted is the client.
// When a trusted proxy's hop is not an address (RFC 7239's "unknown" or an
// obfuscated identifier, or garbage), that proxy's address is returned:
// nothing to its left can be trusted. When every hop is trusted, the
// leftmost is returned.
//
// Elements are split at every comma, even inside a quoted string (RFC
// 7239 allows that, but no address has a comma): a client's malformed
// prefix then cannot swallow the hops the proxies appended.
func (tp TrustedProxies) Resolve(peer netip.Addr, values []string) netip.Addr {
	client := normalize(peer)
	if !tp.trusts(client) {
		return client // its headers are the client's own words
	}
	parse := parseXForwardedFor
	if tp.Header == Forwarded {
		parse = parseForwardedElement
	}
	for i := len(values) - 1; i >= 0; i-- {
		elems := strings.Split(values[i], ",")
		for j := len(elems) - 1; j >= 0; j-- {
			a, ok := parse(elems[j])
			if !ok {
				return client
			}
			client = a
			if !tp.trusts(client) {
				return client
			}
		}
	}
	return client
}

// normalize unmaps an IPv4-mapped IPv6 address and drops a zone.
func normalize(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}

// parseXForwardedFor parses one element of X-Forwarded-For: an address,
// optionally with a port ("192.0.2.1:8080", "[2001:db8::1]:8080") or in
// brackets.
func parseXForwardedFor(s string) (netip.Addr, bool) {
	return parseNode(strings.TrimSpace(s))
}

// parseNode parses an address with an optional port or brackets.
func parseNode(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return normalize(a), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Zone() == "" {
		return normalize(ap.Addr()), true
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() && a.Zone() == "" {
			return normalize(a), true
		}
	}
	return netip.Addr{}, false
}

// parseForwardedElement returns the address of the "for" parameter of one
// Forwarded element (RFC 7239 §4): pairs separated by ';', each a token,
// '=' and a token or a quoted string. An element with no "for", or more
// than one, or a malformed pair has no address.
func parseForwardedElement(elem string) (netip.Addr, bool) {
	var node string
	found := false
	for pair := range strings.SplitSeq(elem, ";") {
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !isToken(name, "") {
			return netip.Addr{}, false
		}
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			if value, ok = unquote(value[1 : len(value)-1]); !ok {
				return netip.Addr{}, false
			}
		} else if !isToken(value, ":[]") {
			// A token; an unquoted IPv6 address or port, which RFC 7239
			// asks to quote, is taken too.
			return netip.Addr{}, false
		}
		if strings.EqualFold(name, "for") {
			if found {
				return netip.Addr{}, false
			}
			node, found = value, true
		}
	}
	if !found {
		return netip.Addr{}, false
	}
	return parseNode(node) // "unknown" and "_obfuscated" are not addresses
}

// unquote undoes the quoted-pair escapes of a quoted string's content.
func unquote(s string) (string, bool) {
	if !strings.ContainsAny(s, `\"`) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			return "", false
		case '\\':
			if i++; i == len(s) {
				return "", false
			}
		}
		b.WriteByte(s[i])
	}
	return b.String(), true
}

// isToken reports whether s is a non-empty token (RFC 9110 §5.6.2), whose
// bytes may also be any of extra.
func isToken(s, extra string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(extra, c) >= 0 {
			continue
		}
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
