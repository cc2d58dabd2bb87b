package sqlite_test

import (
	"context"
	"errors"
	"testing"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/store/sqlite"
	"github.com/sluicehq/sluice/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	s, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.Run(t, s, "ws-sqlite")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCap runs the conformance suite's test of the bound on overrides.
func TestCap(t *testing.T) {
	s, err := sqlite.Open(context.Background(), sqlite.Config{Dir: t.TempDir(), MaxOverrides: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.RunCap(t, s, "ws-sqlite-cap", 3)
}

func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := s.EnsureNamespace(ctx, "ws", "api")
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = sqlite.Open(ctx, sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Namespace(ctx, "ws", "api")
	if err != nil || got.ID != ns.ID {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  sqlite.Config
		bad  bool
	}{
		{"empty dir", sqlite.Config{}, true},
		{"negative overrides", sqlite.Config{Dir: "x", MaxOverrides: -1}, true},
		{"dir", sqlite.Config{Dir: "x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err != nil) != tc.bad || (err != nil && !errors.Is(err, sqlite.ErrInvalidConfig)) {
				t.Fatalf("Validate() = %v", err)
			}
		})
	}
}

// TestRelativeDir opens the store in a relative folder, as the default
// --data-dir (./sluice-data) does.
func TestRelativeDir(t *testing.T) {
	t.Chdir(t.TempDir())
	s, err := sqlite.Open(context.Background(), sqlite.Config{Dir: "sluice-data"})
	if err != nil {
		t.Fatalf("Open with a relative dir: %v", err)
	}
	defer s.Close()
	if _, err := s.EnsureNamespace(context.Background(), "ws", "api"); err != nil {
		t.Fatal(err)
	}
}
