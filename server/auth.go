package server

import (
	"crypto/sha256"
	"crypto/subtle"
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

// RootKey grants its bearer access to one workspace.
type RootKey struct {
	// Key is the secret sent as "Authorization: Bearer <Key>".
	Key string
	// Workspace is the tenant the key acts in.
	Workspace string
}

// ParseRootKey parses "KEY:WORKSPACE", splitting at the last ':' so that a
// key may itself contain ':'. Key and workspace must be non-empty, printable
// and free of spaces; the workspace is at most 255 bytes.
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

// Validate reports whether k is usable.
func (k RootKey) Validate() error {
	switch {
	case k.Key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidRootKey)
	case k.Workspace == "":
		return fmt.Errorf("%w: empty workspace", ErrInvalidRootKey)
	case len(k.Workspace) > 255:
		return fmt.Errorf("%w: workspace longer than 255 bytes", ErrInvalidRootKey)
	case strings.IndexFunc(k.Key, notToken) >= 0:
		return fmt.Errorf("%w: key contains a space or non-printable character", ErrInvalidRootKey)
	case strings.IndexFunc(k.Workspace, notToken) >= 0:
		return fmt.Errorf("%w: workspace %q contains a space or non-printable character", ErrInvalidRootKey, k.Workspace)
	}
	return nil
}

func notToken(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }

// keyring authenticates bearer tokens. It compares the SHA-256 of the
// presented token with the SHA-256 of every configured key in constant time,
// always checking all keys, so neither a key's content nor its position
// leaks through timing.
type keyring struct {
	hashes     [][sha256.Size]byte
	workspaces []string
	open       bool // no keys: any token is OpenWorkspace
}

func newKeyring(keys []RootKey) (*keyring, error) {
	kr := &keyring{open: len(keys) == 0}
	seen := make(map[string]bool)
	for _, k := range keys {
		if err := k.Validate(); err != nil {
			return nil, err
		}
		if seen[k.Key] {
			return nil, fmt.Errorf("%w: the same key is configured twice", ErrInvalidRootKey)
		}
		seen[k.Key] = true
		kr.hashes = append(kr.hashes, sha256.Sum256([]byte(k.Key)))
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
