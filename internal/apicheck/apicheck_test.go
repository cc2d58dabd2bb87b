package apicheck

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite api/public.txt with the module's public API as it is")

// recorded is the file that records the public API, from the module root.
const recorded = "api/public.txt"

// TestPublicAPI fails when the module's public API differs from the one
// recorded in api/public.txt, naming each line added or removed. A change
// to the API is deliberate when the same commit updates the file:
//
//	go test ./internal/apicheck -run TestPublicAPI -update
func TestPublicAPI(t *testing.T) {
	root := filepath.Join("..", "..")
	got, err := List(root, "github.com/sluicehq/sluice")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, recorded)
	if *update {
		if err := os.WriteFile(file, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v; record the API with: go test ./internal/apicheck -run TestPublicAPI -update", err)
	}
	want := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for _, l := range got {
		if !slices.Contains(want, l) {
			t.Errorf("added to the public API: %s", l)
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			t.Errorf("removed from the public API: %s", l)
		}
	}
	if t.Failed() {
		t.Log("if the change is deliberate, record it in the same commit: go test ./internal/apicheck -run TestPublicAPI -update")
	}
}

// TestListing checks the listing of a small package with each kind of
// declaration.
func TestListing(t *testing.T) {
	dir := t.TempDir()
	src := `package p

const Exported, unexported = 1, 2

var V int

type T struct {
	A int
	b int
	Embedded
}

type Embedded struct{}

type I interface {
	M(x int) error
}

type G[K comparable] map[K]int

type Alias = T

func F(a, b string) (int, error) { return 0, nil }

func (t *T) Method() {}

func (t *T) hidden() {}

type hidden struct{}

func (hidden) Exported() {}
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nfunc TestX() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"internal", "main"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "internal", "i.go"), []byte("package internal\n\nfunc Hidden() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main", "m.go"), []byte("package main\n\nfunc Exported() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := List(dir, "example.com/m")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg example.com/m, const Exported",
		"pkg example.com/m, func F(a, b string) (int, error)",
		"pkg example.com/m, method (*T) Method()",
		"pkg example.com/m, type Alias = T",
		"pkg example.com/m, type Embedded struct",
		"pkg example.com/m, type G[K comparable] map[K]int",
		"pkg example.com/m, type I interface",
		"pkg example.com/m, type I interface, M(x int) error",
		"pkg example.com/m, type T struct",
		"pkg example.com/m, type T struct, A int",
		"pkg example.com/m, type T struct, embedded Embedded",
		"pkg example.com/m, var V int",
	}
	if !slices.Equal(got, want) {
		t.Errorf("listing:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestEveryExportedNameDocumented fails for each exported name of a public
// package that has no doc comment.
func TestEveryExportedNameDocumented(t *testing.T) {
	names, err := Undocumented(filepath.Join("..", ".."), "github.com/sluicehq/sluice")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		t.Errorf("%s has no doc comment", n)
	}
}
