// Package store persists the server's namespaces and rate-limit overrides and
// keeps them in memory for the request path.
//
// A [Store] is the durable record: store/sqlite for one node, store/redis and
// store/mysql shared by many. A [Cache] sits in front of it: the request path
// reads only the cache, writes go to the store and then to the cache, and a
// refresh loop re-reads the store so that a change made on another node is
// visible within one refresh interval. A shared store that also implements
// [Watcher] tells the cache about other nodes' changes as they happen, so
// they are seen within a fraction of a second; the periodic refresh stays as
// the safety net for a missed notification.
//
// Every record belongs to one workspace. Namespaces are looked up within a
// workspace only, and overrides are reached only through their namespace, so
// one workspace can never name another's records.
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNotFound is returned, possibly wrapped, when a namespace or override does
// not exist in the caller's workspace.
var ErrNotFound = errors.New("store: not found")

// ErrClosed is returned by a [Cache] or [Store] used after Close.
var ErrClosed = errors.New("store: closed")

// ErrUnavailable is returned, wrapped with the cause, when the store cannot be
// reached (connection refused or lost, timeout, server not ready). The
// operation may be retried later; a [Cache] keeps serving its last good copy.
var ErrUnavailable = errors.New("store: unavailable")

// ErrLimitReached is returned, wrapped in a [*LimitError] that names the
// bound, when a write would grow a workspace past a bound of the store: every
// store bounds the overrides of a namespace, and store/redis also the
// namespaces of a workspace. Nothing was written.
var ErrLimitReached = errors.New("store: limit reached")

// DefaultMaxOverrides is the default bound on the overrides of one
// namespace, in every store.
const DefaultMaxOverrides = 10_000

// Bound names a bound of a store.
type Bound string

// The bounds a [LimitError] reports.
const (
	// BoundOverrides is the number of overrides of one namespace.
	BoundOverrides Bound = "overrides per namespace"
	// BoundNamespaces is the number of namespaces of one workspace.
	BoundNamespaces Bound = "namespaces per workspace"
)

// LimitError is the error of a write refused because it would grow past a
// bound. It wraps [ErrLimitReached].
type LimitError struct {
	// Bound is the bound that was reached.
	Bound Bound
	// Max is its value: the namespace or workspace already holds Max.
	Max int
}

// Error says which bound was reached, e.g. "store: limit reached: at most
// 10000 overrides per namespace".
func (e *LimitError) Error() string {
	return fmt.Sprintf("%v: at most %d %s", ErrLimitReached, e.Max, e.Bound)
}

// Unwrap returns ErrLimitReached.
func (e *LimitError) Unwrap() error { return ErrLimitReached }

// ID prefixes of generated identifiers, as Unkey uses them.
const (
	NamespaceIDPrefix = "rlns_"
	OverrideIDPrefix  = "rlor_"
)

// Namespace groups the identifiers of one workspace under a name.
type Namespace struct {
	// ID is generated on creation (NamespaceIDPrefix + 24 hex digits).
	ID string
	// Workspace owns the namespace.
	Workspace string
	// Name is unique within the workspace.
	Name string
	// CreatedAt is when the namespace was first used.
	CreatedAt time.Time
}

// Override replaces the limit and the duration of every request in its
// namespace whose identifier matches Identifier, an exact identifier or a
// pattern in which each '*' matches any run of bytes (see [Match]).
type Override struct {
	// ID is generated when the override is first set and kept when it is
	// set again (OverrideIDPrefix + 24 hex digits).
	ID string
	// Workspace owns the override (the namespace's workspace).
	Workspace string
	// NamespaceID is the namespace the override belongs to.
	NamespaceID string
	// Identifier is the exact identifier or wildcard pattern.
	Identifier string
	// Limit replaces the request's limit.
	Limit int64
	// Duration replaces the request's window length.
	Duration time.Duration
	// CreatedAt and UpdatedAt are set by the store.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Wildcard reports whether the override is a pattern rather than an exact
// identifier.
func (o Override) Wildcard() bool { return strings.Contains(o.Identifier, "*") }

// Snapshot is the full content of a store, read consistently enough for the
// cache: every namespace and every override.
type Snapshot struct {
	Namespaces []Namespace
	Overrides  []Override
}

// Store is the durable record of namespaces and overrides. Implementations
// are safe for concurrent use and compare names and identifiers byte for byte.
type Store interface {
	// EnsureNamespace returns workspace's namespace called name, creating it
	// on first use.
	EnsureNamespace(ctx context.Context, workspace, name string) (Namespace, error)
	// Namespace returns workspace's namespace whose ID or, failing that,
	// whose name is idOrName; ErrNotFound if there is none.
	Namespace(ctx context.Context, workspace, idOrName string) (Namespace, error)
	// SetOverride creates or replaces the override of (o.NamespaceID,
	// o.Identifier) and returns it as stored. o.ID is ignored: a new
	// override gets a new ID, a replaced one keeps its ID. It fails with
	// ErrNotFound when o.NamespaceID is not a namespace of o.Workspace, and
	// with a *LimitError (BoundOverrides) when the override would be a new
	// one in a namespace that already holds the store's maximum; the check
	// and the write are atomic, so concurrent writers never take the
	// namespace past it.
	SetOverride(ctx context.Context, o Override) (Override, error)
	// Override returns the override of (namespaceID, identifier) in
	// workspace; ErrNotFound if there is none.
	Override(ctx context.Context, workspace, namespaceID, identifier string) (Override, error)
	// ListOverrides returns at most limit overrides of the namespace whose
	// identifiers sort (bytewise) after after, in that order.
	ListOverrides(ctx context.Context, workspace, namespaceID, after string, limit int) ([]Override, error)
	// DeleteOverride removes the override of (namespaceID, identifier) in
	// workspace; ErrNotFound if there is none.
	DeleteOverride(ctx context.Context, workspace, namespaceID, identifier string) error
	// Snapshot reads every namespace and override.
	Snapshot(ctx context.Context) (Snapshot, error)
	// Ping checks that the store is reachable.
	Ping(ctx context.Context) error
	// Close releases the store. It is idempotent.
	Close() error
}

// Watcher is implemented by a shared [Store] that can report changes made
// through other Store values on the same backend (other nodes) as they
// happen. A [Cache] over a Watcher refreshes when told to, rather than only
// once per refresh period.
type Watcher interface {
	// Watch runs until ctx is done and then returns nil; it returns
	// another error only if it cannot watch at all. It calls changed,
	// from Watch's own goroutine, soon after every write through any Store
	// on the same backend, and also whenever changes may have been missed:
	// once it is first watching and again after every reconnection. A call
	// may also be spurious. changed must not block.
	Watch(ctx context.Context, changed func()) error
}

// NewID returns prefix followed by 24 random hex digits (96 bits).
func NewID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return prefix + hex.EncodeToString(b[:])
}
