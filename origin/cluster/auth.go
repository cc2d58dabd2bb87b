package cluster

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a peer call. Each is checked before a byte of the body is
// read: a call that is malformed, stale, addressed to another node or to an
// earlier incarnation of this one, or sent by a node that is not a member,
// is refused on its headers alone.
const (
	// headerFrom is the sender's member id.
	headerFrom = "Sluice-Cluster-From"
	// headerTo is the receiver's member id.
	headerTo = "Sluice-Cluster-To"
	// headerIncarnation is the receiver's incarnation (see [Origin.Incarnation]).
	headerIncarnation = "Sluice-Cluster-Incarnation"
	// headerAuth is "<unix ms>.<nonce>.<hex HMAC-SHA256>": the nonce, 16
	// random hex digits, makes each call unique, so that a receiver takes a
	// signed call once (see replays).
	headerAuth = "Sluice-Cluster-Auth"
)

// maxSkew is how far a call's timestamp may be from the receiver's clock.
const maxSkew = time.Minute

// maxIDBytes bounds a member id in a call's headers.
const maxIDBytes = 512

// incarnationLen is the length of an incarnation: 128 random bits in hex.
const incarnationLen = 32

// RefuseReason says why this node refused a peer call, for the metrics
// label of [Observer.Refused]. The set is fixed, so labels stay bounded.
type RefuseReason string

// The reasons of a refusal. Those up to ReasonUnknownSender are decided on
// the headers, before the body is read.
const (
	// ReasonMalformed: a missing or malformed header, or an unknown call.
	ReasonMalformed RefuseReason = "malformed"
	// ReasonStale: a timestamp more than a minute from this node's clock.
	ReasonStale RefuseReason = "stale"
	// ReasonMisdirected: signed for another node, or for an earlier
	// incarnation of this one (a call captured before a restart).
	ReasonMisdirected RefuseReason = "misdirected"
	// ReasonUnknownSender: the sender is not a member this node knows.
	ReasonUnknownSender RefuseReason = "unknown_sender"
	// ReasonTooLarge: a body over the cap (maxBody).
	ReasonTooLarge RefuseReason = "too_large"
	// ReasonBusy: the bodies being read already hold the memory budget of
	// the peer RPC (maxInflightBody); the sender tries again later.
	ReasonBusy RefuseReason = "busy"
	// ReasonBadMAC: the HMAC does not match (another secret, a changed body).
	ReasonBadMAC RefuseReason = "bad_mac"
	// ReasonReplayed: a signed call this node has taken before.
	ReasonReplayed RefuseReason = "replayed"
	// ReasonBadRequest: an authenticated call whose body is invalid.
	ReasonBadRequest RefuseReason = "bad_request"
)

// refusal is a refused peer call: its status, reason and message.
type refusal struct {
	status int
	reason RefuseReason
	msg    string
}

func (r *refusal) Error() string { return r.msg }

func refuse(status int, reason RefuseReason, format string, args ...any) *refusal {
	return &refusal{status: status, reason: reason, msg: "cluster: peer call refused: " + fmt.Sprintf(format, args...)}
}

// rpcKey derives the HMAC key of the peer RPC from the cluster secret.
func rpcKey(secret string) []byte { return deriveKey(secret, "sluice cluster rpc v2") }

// gossipKey derives the 32-byte key of memberlist's encryption from the
// cluster secret.
func gossipKey(secret string) []byte { return deriveKey(secret, "sluice cluster gossip v2") }

// deriveKey derives a 32-byte key for one purpose from the cluster secret
// with HKDF-SHA256 (RFC 5869), the purpose as its info: keys of different
// purposes are independent, so one never reveals another or the secret.
// The secret is required to be long and random (32 bytes or more), which
// is what HKDF expects; it is not a password.
func deriveKey(secret, purpose string) []byte {
	key, err := hkdf.Key(sha256.New, []byte(secret), nil, purpose, 32)
	if err != nil {
		panic("cluster: HKDF-SHA256 refused a 32-byte key: " + err.Error()) // only for lengths above 255×32
	}
	return key
}

// newIncarnation draws the random id of one run of a node.
func newIncarnation() string {
	var b [incarnationLen / 2]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// callAuth is what a call's headers say: who sent it to whom, when, and
// its MAC.
type callAuth struct {
	kind              Kind
	from, to, inc     string
	ts                int64
	stamp, nonce, mac string // as sent
}

// sign returns the MAC of a call: every field of a, then body, each
// prefixed with its length so that no two calls sign the same bytes.
func sign(key []byte, a callAuth, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("sluice cluster rpc v2\x00"))
	var n [8]byte
	for _, part := range []string{string(a.kind), a.from, a.to, a.inc, a.stamp, a.nonce} {
		m.Write(binary.BigEndian.AppendUint64(n[:0], uint64(len(part))))
		m.Write([]byte(part))
	}
	m.Write(body)
	return m.Sum(nil)
}

// newCallAuth returns the signed headers of a call of kind from this node
// to member to (at incarnation inc) at ts (unix ms), with a fresh nonce.
func newCallAuth(key []byte, kind Kind, from, to, inc string, ts int64, body []byte) callAuth {
	var n [8]byte
	_, _ = rand.Read(n[:]) // crypto/rand.Read never fails
	a := callAuth{kind: kind, from: from, to: to, inc: inc, ts: ts, stamp: strconv.FormatInt(ts, 10), nonce: hex.EncodeToString(n[:])}
	a.mac = hex.EncodeToString(sign(key, a, body))
	return a
}

// set writes a to h.
func (a callAuth) set(h http.Header) {
	h.Set(headerFrom, a.from)
	h.Set(headerTo, a.to)
	h.Set(headerIncarnation, a.inc)
	h.Set(headerAuth, a.stamp+"."+a.nonce+"."+a.mac)
}

// errMalformed is the refusal of headers that do not parse.
var errMalformed = errors.New("malformed")

// parseCallAuth reads the headers of a call of kind; it checks their form
// only.
func parseCallAuth(kind Kind, h http.Header) (callAuth, error) {
	one := func(name string, maxLen int) (string, error) {
		v := h.Values(name)
		if len(v) != 1 || v[0] == "" || len(v[0]) > maxLen {
			return "", fmt.Errorf("%w: want one %s header of 1 to %d bytes", errMalformed, name, maxLen)
		}
		return v[0], nil
	}
	a := callAuth{kind: kind}
	var auth string
	var err error
	for _, f := range []struct {
		dst    *string
		name   string
		maxLen int
	}{{&a.from, headerFrom, maxIDBytes}, {&a.to, headerTo, maxIDBytes}, {&a.inc, headerIncarnation, incarnationLen}, {&auth, headerAuth, 128}} {
		if *f.dst, err = one(f.name, f.maxLen); err != nil {
			return a, err
		}
	}
	parts := strings.Split(auth, ".")
	if len(parts) != 3 || len(parts[1]) != 16 || len(parts[2]) != 2*sha256.Size {
		return a, fmt.Errorf("%w: %s is not <unix ms>.<16 hex digits>.<64 hex digits>", errMalformed, headerAuth)
	}
	a.stamp, a.nonce, a.mac = parts[0], parts[1], parts[2]
	if a.ts, err = strconv.ParseInt(a.stamp, 10, 64); err != nil {
		return a, fmt.Errorf("%w: %s timestamp: %w", errMalformed, headerAuth, err)
	}
	return a, nil
}

// checkHeaders refuses, on its headers alone, a call of kind that is
// malformed, stale, signed for another node or incarnation, or sent by a
// node that is not a member.
func (o *Origin) checkHeaders(kind Kind, h http.Header) (callAuth, *refusal) {
	a, err := parseCallAuth(kind, h)
	if err != nil {
		return a, refuse(http.StatusUnauthorized, ReasonMalformed, "%v", err)
	}
	if skew := o.cfg.Clock().Sub(time.UnixMilli(a.ts)); skew > maxSkew || skew < -maxSkew {
		return a, refuse(http.StatusUnauthorized, ReasonStale, "timestamp %v away from this node's clock", skew.Round(time.Second))
	}
	if a.to != o.cfg.ID || a.inc != o.incarnation {
		// 421: the sender's view of this node is stale (it restarted) or
		// the call was meant for another node.
		return a, refuse(http.StatusMisdirectedRequest, ReasonMisdirected, "signed for another node or another incarnation of this one")
	}
	if o.view.Load().peers[a.from] == nil {
		return a, refuse(http.StatusUnauthorized, ReasonUnknownSender, "sender %q is not a member known here", a.from)
	}
	return a, nil
}

// checkMAC checks the MAC of an authenticated call's body, then that its
// nonce was not taken before.
func (o *Origin) checkMAC(a callAuth, body []byte) *refusal {
	got, err := hex.DecodeString(a.mac)
	if err != nil || !hmac.Equal(got, sign(o.key, a, body)) {
		return refuse(http.StatusUnauthorized, ReasonBadMAC, "not authenticated")
	}
	if !o.replays.claim(a.ts, a.nonce, o.cfg.Clock().UnixMilli()) {
		return refuse(http.StatusUnauthorized, ReasonReplayed, "a replayed call")
	}
	return nil
}
