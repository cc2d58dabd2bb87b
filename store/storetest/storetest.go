// Package storetest is a conformance suite that every store.Store
// implementation runs in its own tests.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/store"
)

// Run exercises s. workspace must be unique to this run (so that runs
// against a shared database do not see each other's rows).
func Run(t *testing.T, s store.Store, workspace string) {
	ctx := context.Background()
	other := workspace + "-other"

	t.Run("namespaces", func(t *testing.T) {
		a, err := s.EnsureNamespace(ctx, workspace, "api")
		if err != nil {
			t.Fatal(err)
		}
		again, err := s.EnsureNamespace(ctx, workspace, "api")
		if err != nil || again.ID != a.ID {
			t.Fatalf("EnsureNamespace twice: %v, %q vs %q", err, again.ID, a.ID)
		}
		for _, tc := range []struct {
			name, ws, idOrName string
			want               error
		}{
			{"by name", workspace, "api", nil},
			{"by id", workspace, a.ID, nil},
			{"other workspace by name", other, "api", store.ErrNotFound},
			{"other workspace by id", other, a.ID, store.ErrNotFound},
			{"case differs", workspace, "API", store.ErrNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got, err := s.Namespace(ctx, tc.ws, tc.idOrName)
				if !errors.Is(err, tc.want) {
					t.Fatalf("err %v, want %v", err, tc.want)
				}
				if err == nil && got.ID != a.ID {
					t.Fatalf("got %+v", got)
				}
			})
		}
		b, err := s.EnsureNamespace(ctx, other, "api")
		if err != nil || b.ID == a.ID || b.Workspace != other {
			t.Fatalf("other workspace's namespace: %+v, %v", b, err)
		}
	})

	t.Run("overrides", func(t *testing.T) {
		ns, err := s.EnsureNamespace(ctx, workspace, "ov")
		if err != nil {
			t.Fatal(err)
		}
		o, err := s.SetOverride(ctx, store.Override{Workspace: workspace, NamespaceID: ns.ID, Identifier: "user_*", Limit: 5, Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if o.ID == "" || o.Limit != 5 || o.Duration != time.Minute {
			t.Fatalf("set: %+v", o)
		}
		o2, err := s.SetOverride(ctx, store.Override{Workspace: workspace, NamespaceID: ns.ID, Identifier: "user_*", Limit: 7, Duration: time.Hour})
		if err != nil || o2.ID != o.ID || o2.Limit != 7 || o2.Duration != time.Hour {
			t.Fatalf("replace keeps the id and updates: %+v, %v", o2, err)
		}
		got, err := s.Override(ctx, workspace, ns.ID, "user_*")
		if err != nil || got != o2 {
			t.Fatalf("get: %+v, %v (want %+v)", got, err, o2)
		}
		if _, err := s.Override(ctx, other, ns.ID, "user_*"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("other workspace reads the override: %v", err)
		}
		if err := s.DeleteOverride(ctx, other, ns.ID, "user_*"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("other workspace deletes the override: %v", err)
		}
		if err := s.DeleteOverride(ctx, workspace, ns.ID, "user_*"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteOverride(ctx, workspace, ns.ID, "user_*"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})

	t.Run("list pages in identifier order", func(t *testing.T) {
		ns, err := s.EnsureNamespace(ctx, workspace, "list")
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for i := range 7 {
			id := fmt.Sprintf("id-%02d", 6-i) // inserted out of order
			want = append([]string{id}, want...)
			if _, err := s.SetOverride(ctx, store.Override{Workspace: workspace, NamespaceID: ns.ID, Identifier: id, Limit: int64(i), Duration: time.Second}); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		after := ""
		for {
			page, err := s.ListOverrides(ctx, workspace, ns.ID, after, 3)
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
		if page, err := s.ListOverrides(ctx, other, ns.ID, "", 100); err != nil || len(page) != 0 {
			t.Fatalf("other workspace lists %d overrides (%v)", len(page), err)
		}
	})

	t.Run("snapshot", func(t *testing.T) {
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mine int
		for _, o := range snap.Overrides {
			if o.Workspace == workspace {
				mine++
			}
		}
		if mine != 7 {
			t.Fatalf("snapshot has %d overrides of the workspace, want 7", mine)
		}
	})

	t.Run("bytes are preserved", func(t *testing.T) {
		for _, name := range []string{"ünïcødé", "with space", "emoji 🚦", "a*b*c"} {
			ns, err := s.EnsureNamespace(ctx, workspace, name)
			if err != nil {
				t.Fatal(err)
			}
			if ns.Name != name {
				t.Fatalf("stored %q as %q", name, ns.Name)
			}
		}
	})

	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}
