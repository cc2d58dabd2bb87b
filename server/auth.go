package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// ErrInvalidRootKey is returned, wrapped with the reason, by [ParseRootKey].
var ErrInvalidRootKey = errors.New("server: invalid root key")

// OpenWorkspace is the workspace of every caller when no root key is
// configured (allowed only on a loopback address).
const OpenWorkspace = "default"

// MinRootKeyBytes is the shortest root key accepted, in bytes: a shorter
// one can be guessed. A key given by its hash cannot be checked; `sluice
// hash-key` refuses to hash a shorter one.
const MinRootKeyBytes = 16

// RootKey grants its bearer access to one workspace. It holds either the
// key itself or only its SHA-256, so that a configuration need not hold the
// secret; both are compared the same way.
type RootKey struct {
	// Key is the secret sent as "Authorization: Bearer <Key>". Empty when
	// the key is given by its hash.
	Key string
	// SHA256 is the SHA-256 of the key, used when Key is empty.
	SHA256 [sha256.Size]byte
	// Workspace is the tenant the key acts in.
	Workspace string
}

// HashRootKey returns the SHA-256 of key as 64 lower-case hex digits, the
// form [ParseHashedRootKey] reads.
func HashRootKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// ParseHashedRootKey parses "HEX:WORKSPACE", where HEX is the SHA-256 of the
// key in 64 hex digits (what [HashRootKey] and `sluice hash-key` print). An
// error never quotes HEX.
func ParseHashedRootKey(s string) (RootKey, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return RootKey{}, fmt.Errorf("%w: want SHA256HEX:WORKSPACE, got no ':'", ErrInvalidRootKey)
	}
	var k RootKey
	if n, err := hex.Decode(k.SHA256[:], []byte(s[:i])); err != nil || n != sha256.Size || len(s[:i]) != 2*sha256.Size {
		return RootKey{}, fmt.Errorf("%w: the hash must be 64 hex digits, the SHA-256 of the key (sluice hash-key prints it)", ErrInvalidRootKey)
	}
	k.Workspace = s[i+1:]
	if err := k.Validate(); err != nil {
		return RootKey{}, err
	}
	return k, nil
}

// ParseRootKey parses "KEY:WORKSPACE", splitting at the last ':' so that a
// key may itself contain ':'. Key and workspace must be printable and free
// of spaces, the key at least MinRootKeyBytes long, the workspace 1 to 255
// bytes. An error never quotes the key.
func ParseRootKey(s string) (RootKey, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return RootKey{}, fmt.Errorf("%w: want KEY:WORKSPACE, got no ':'", ErrInvalidRootKey)
	}
	k := RootKey{Key: s[:i], Workspace: s[i+1:]}
	if err := k.Validate(); err != nil {
		return RootKey{}, err
	}
	return k, nil
}

// Validate reports whether k is usable: a key (at least MinRootKeyBytes
// long) or its hash, and a workspace.
func (k RootKey) Validate() error {
	switch {
	case k.Key == "" && k.SHA256 == [sha256.Size]byte{}:
		return fmt.Errorf("%w: empty key", ErrInvalidRootKey)
	case k.Key != "" && k.SHA256 != [sha256.Size]byte{}:
		return fmt.Errorf("%w: set the key or its hash, not both", ErrInvalidRootKey)
	case k.Workspace == "":
		return fmt.Errorf("%w: empty workspace", ErrInvalidRootKey)
	case len(k.Workspace) > 255:
		return fmt.Errorf("%w: workspace longer than 255 bytes", ErrInvalidRootKey)
	case strings.IndexFunc(k.Key, notToken) >= 0:
		return fmt.Errorf("%w: key contains a space or non-printable character", ErrInvalidRootKey)
	case strings.IndexFunc(k.Workspace, notToken) >= 0:
		return fmt.Errorf("%w: workspace %q contains a space or non-printable character", ErrInvalidRootKey, k.Workspace)
	case k.Key != "" && len(k.Key) < MinRootKeyBytes:
		return fmt.Errorf("%w: the key of workspace %q is %d bytes long; a root key must be at least %d bytes (e.g. openssl rand -hex 32)", ErrInvalidRootKey, k.Workspace, len(k.Key), MinRootKeyBytes)
	}
	return nil
}

func notToken(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }

// hash returns the SHA-256 of k's key.
func (k RootKey) hash() [sha256.Size]byte {
	if k.Key == "" {
		return k.SHA256
	}
	return sha256.Sum256([]byte(k.Key))
}

// keyring authenticates bearer tokens. It keeps only the SHA-256 of each
// key (given as such or hashed at start) and compares the SHA-256 of the
// presented token with every one of them in constant time, always checking
// all keys, so neither a key's content nor its position leaks through timing.
type keyring struct {
	hashes     [][sha256.Size]byte
	workspaces []string
	open       bool // no keys: any token is OpenWorkspace
}

func newKeyring(keys []RootKey) (*keyring, error) {
	kr := &keyring{open: len(keys) == 0}
	seen := make(map[[sha256.Size]byte]bool)
	for _, k := range keys {
		if err := k.Validate(); err != nil {
			return nil, err
		}
		h := k.hash()
		if seen[h] {
			return nil, fmt.Errorf("%w: the same key is configured twice (workspace %q)", ErrInvalidRootKey, k.Workspace)
		}
		seen[h] = true
		kr.hashes = append(kr.hashes, h)
		kr.workspaces = append(kr.workspaces, k.Workspace)
	}
	return kr, nil
}

// authenticate returns the workspace of the Authorization header value, or
// ok=false with the reason.
func (kr *keyring) authenticate(header string) (workspace string, missing, ok bool) {
	const prefix = "bearer "
	if len(header) < len(prefix) || !strings.EqualFold(header[:len(prefix)], prefix) {
		return "", true, false
	}
	token := strings.TrimSpace(header[len(prefix):])
	if token == "" {
		return "", true, false
	}
	if kr.open {
		return OpenWorkspace, false, true
	}
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range kr.hashes {
		if subtle.ConstantTimeCompare(h[:], kr.hashes[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false, false
	}
	return kr.workspaces[found], false, true
}
