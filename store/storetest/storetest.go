// Package storetest is a conformance suite that every store.Store
// implementation runs in its own tests.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// Run exercises s. workspace must be unique to this run (so that runs
// against a shared database do not see each other's rows).
func Run(t *testing.T, s store.Store, workspace string) {
	c := suite{s: s, workspace: workspace, other: workspace + "-other"}
	t.Run("namespaces", c.namespaces)
	t.Run("overrides", c.overrides)
	t.Run("list pages in identifier order", c.listPages)
	t.Run("snapshot", c.snapshot)
	t.Run("bytes are preserved", c.bytesPreserved)
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// suite is the conformance suite of one store, in one workspace (and a
// second one, other, that must not see the first's rows).
type suite struct {
	s                store.Store
	workspace, other string
}

// namespaces checks that EnsureNamespace is idempotent and that a
// namespace is found by name or id in its own workspace only.
func (c suite) namespaces(t *testing.T) {
	ctx := context.Background()
	a, err := c.s.EnsureNamespace(ctx, c.workspace, "api")
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.s.EnsureNamespace(ctx, c.workspace, "api")
	if err != nil || again.ID != a.ID {
		t.Fatalf("EnsureNamespace twice: %v, %q vs %q", err, again.ID, a.ID)
	}
	for _, tc := range []struct {
		name, ws, idOrName string
		want               error
	}{
		{"by name", c.workspace, "api", nil},
		{"by id", c.workspace, a.ID, nil},
		{"other workspace by name", c.other, "api", store.ErrNotFound},
		{"other workspace by id", c.other, a.ID, store.ErrNotFound},
		{"case differs", c.workspace, "API", store.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.s.Namespace(ctx, tc.ws, tc.idOrName)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil && got.ID != a.ID {
				t.Fatalf("got %+v", got)
			}
		})
	}
	b, err := c.s.EnsureNamespace(ctx, c.other, "api")
	if err != nil || b.ID == a.ID || b.Workspace != c.other {
		t.Fatalf("other workspace's namespace: %+v, %v", b, err)
	}
}

// overrides checks set, replace, get and delete of an override, within
// its workspace only.
func (c suite) overrides(t *testing.T) {
	ctx := context.Background()
	ns, err := c.s.EnsureNamespace(ctx, c.workspace, "ov")
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.s.SetOverride(ctx, store.Override{Workspace: c.workspace, NamespaceID: ns.ID, Identifier: "user_*", Limit: 5, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if o.ID == "" || o.Limit != 5 || o.Duration != time.Minute {
		t.Fatalf("set: %+v", o)
	}
	o2, err := c.s.SetOverride(ctx, store.Override{Workspace: c.workspace, NamespaceID: ns.ID, Identifier: "user_*", Limit: 7, Duration: time.Hour})
	if err != nil || o2.ID != o.ID || o2.Limit != 7 || o2.Duration != time.Hour {
		t.Fatalf("replace keeps the id and updates: %+v, %v", o2, err)
	}
	got, err := c.s.Override(ctx, c.workspace, ns.ID, "user_*")
	if err != nil || got != o2 {
		t.Fatalf("get: %+v, %v (want %+v)", got, err, o2)
	}
	if _, err := c.s.Override(ctx, c.other, ns.ID, "user_*"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("other workspace reads the override: %v", err)
	}
	if err := c.s.DeleteOverride(ctx, c.other, ns.ID, "user_*"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("other workspace deletes the override: %v", err)
	}
	if err := c.s.DeleteOverride(ctx, c.workspace, ns.ID, "user_*"); err != nil {
		t.Fatal(err)
	}
	if err := c.s.DeleteOverride(ctx, c.workspace, ns.ID, "user_*"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
}

// listPages checks that overrides list in identifier order, page by page,
// within their workspace only.
func (c suite) listPages(t *testing.T) {
	ctx := context.Background()
	ns, err := c.s.EnsureNamespace(ctx, c.workspace, "list")
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("id-%02d", 6-i) // inserted out of order
		want = append([]string{id}, want...)
		if _, err := c.s.SetOverride(ctx, store.Override{Workspace: c.workspace, NamespaceID: ns.ID, Identifier: id, Limit: int64(i), Duration: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	after := ""
	for {
		page, err := c.s.ListOverrides(ctx, c.workspace, ns.ID, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page {
			got = append(got, o.Identifier)
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].Identifier
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if page, err := c.s.ListOverrides(ctx, c.other, ns.ID, "", 100); err != nil || len(page) != 0 {
		t.Fatalf("other workspace lists %d overrides (%v)", len(page), err)
	}
}

// snapshot checks that a snapshot holds the overrides listPages wrote.
func (c suite) snapshot(t *testing.T) {
	ctx := context.Background()
	snap, err := c.s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mine int
	for _, o := range snap.Overrides {
		if o.Workspace == c.workspace {
			mine++
		}
	}
	if mine != 7 {
		t.Fatalf("snapshot has %d overrides of the workspace, want 7", mine)
	}
}

// bytesPreserved checks that namespace names keep their bytes.
func (c suite) bytesPreserved(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"ünïcødé", "with space", "emoji 🚦", "a*b*c"} {
		ns, err := c.s.EnsureNamespace(ctx, c.workspace, name)
		if err != nil {
			t.Fatal(err)
		}
		if ns.Name != name {
			t.Fatalf("stored %q as %q", name, ns.Name)
		}
	}
}

// RunCap exercises the bound on the overrides of a namespace. s must have
// been opened with that bound set to maxOverrides (at least 2), and
// workspace must be unique to this run.
func RunCap(t *testing.T, s store.Store, workspace string, maxOverrides int) {
	if maxOverrides < 2 {
		t.Fatalf("storetest: RunCap needs a bound of at least 2, got %d", maxOverrides)
	}
	c := capSuite{s: s, workspace: workspace, max: maxOverrides}
	t.Run("bound", c.bound)
	t.Run("racing writers stop at the bound", c.race)
	t.Run("a namespace of another workspace", func(t *testing.T) {
		ns := c.ensure(t, "cap-owned")
		_, err := s.SetOverride(context.Background(), store.Override{Workspace: workspace + "-other", NamespaceID: ns.ID, Identifier: "x", Limit: 1, Duration: time.Second})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err %v, want ErrNotFound", err)
		}
	})
}

// capSuite holds what the tests of RunCap share.
type capSuite struct {
	s         store.Store
	workspace string
	max       int
}

func (c capSuite) ensure(t *testing.T, name string) store.Namespace {
	t.Helper()
	ns, err := c.s.EnsureNamespace(context.Background(), c.workspace, name)
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func (c capSuite) set(ns store.Namespace, identifier string) error {
	_, err := c.s.SetOverride(context.Background(), store.Override{Workspace: c.workspace, NamespaceID: ns.ID, Identifier: identifier, Limit: 1, Duration: time.Second})
	return err
}

// bound fills a namespace and checks what may and may not be written then,
// and that a refusal is a *store.LimitError naming the bound.
func (c capSuite) bound(t *testing.T) {
	full, other := c.ensure(t, "cap-full"), c.ensure(t, "cap-other")
	for i := range c.max {
		if err := c.set(full, fmt.Sprintf("id-%d", i)); err != nil {
			t.Fatalf("override %d of %d: %v", i+1, c.max, err)
		}
	}
	for _, tc := range []struct {
		name string
		op   func() error
		want error
	}{
		{"a new override past the bound", func() error { return c.set(full, "one-more") }, store.ErrLimitReached},
		{"a new pattern past the bound", func() error { return c.set(full, "one-more-*") }, store.ErrLimitReached},
		{"replacing one at the bound", func() error { return c.set(full, "id-0") }, nil},
		{"another namespace has its own bound", func() error { return c.set(other, "one-more") }, nil},
		{"a delete makes room", func() error { return c.s.DeleteOverride(context.Background(), c.workspace, full.ID, "id-1") }, nil},
		{"then a new one fits", func() error { return c.set(full, "one-more") }, nil},
		{"and the bound holds again", func() error { return c.set(full, "two-more") }, store.ErrLimitReached},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if err == nil {
				return
			}
			var le *store.LimitError
			if !errors.As(err, &le) || le.Bound != store.BoundOverrides || le.Max != c.max {
				t.Fatalf("err %v is not a *store.LimitError of %d %s", err, c.max, store.BoundOverrides)
			}
			if !strings.Contains(err.Error(), strconv.Itoa(c.max)) {
				t.Fatalf("err %q does not name the bound %d", err, c.max)
			}
		})
	}
	if _, err := c.s.Override(context.Background(), c.workspace, full.ID, "two-more"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the refused override was stored: %v", err)
	}
	if n := countOverrides(t, c.s, c.workspace, full.ID); n != c.max {
		t.Fatalf("the namespace holds %d overrides, want %d", n, c.max)
	}
}

// race has 16 writers each try to add max overrides to an empty namespace
// at once, five times: exactly max succeed, the others are refused.
func (c capSuite) race(t *testing.T) {
	for round := range 5 {
		ns := c.ensure(t, fmt.Sprintf("cap-race-%d", round))
		const writers = 16
		var wg sync.WaitGroup
		errs := make([]error, writers*c.max)
		for w := range writers {
			wg.Go(func() {
				for i := range c.max {
					errs[w*c.max+i] = c.set(ns, fmt.Sprintf("w%02d-%d", w, i))
				}
			})
		}
		wg.Wait()
		stored := 0
		for _, err := range errs {
			switch {
			case err == nil:
				stored++
			case !errors.Is(err, store.ErrLimitReached):
				t.Fatalf("round %d: a racing write failed otherwise: %v", round, err)
			}
		}
		if n := countOverrides(t, c.s, c.workspace, ns.ID); stored != c.max || n != c.max {
			t.Fatalf("round %d: %d writes succeeded and the namespace holds %d overrides, want %d and %d", round, stored, n, c.max, c.max)
		}
	}
}

// countOverrides counts the overrides of a namespace, page by page.
func countOverrides(t *testing.T, s store.Store, workspace, namespaceID string) int {
	t.Helper()
	n, after := 0, ""
	for {
		page, err := s.ListOverrides(context.Background(), workspace, namespaceID, after, 100)
		if err != nil {
			t.Fatal(err)
		}
		n += len(page)
		if len(page) < 100 {
			return n
		}
		after = page[len(page)-1].Identifier
	}
}
