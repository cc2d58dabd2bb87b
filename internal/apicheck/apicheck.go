// Package apicheck lists the public API of a Go module: every exported
// name of every package a user can import (not internal, not main, not
// tests), one declaration per line, in a stable order. Its test compares
// the listing of this module with the recorded api/public.txt, so that the
// public API changes only in a commit that also updates that file.
package apicheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// List returns the public API of the module rooted at dir, whose module
// path is module: one line per exported declaration, "pkg <path>, <decl>",
// sorted.
func List(dir, module string) ([]string, error) {
	var lines []string
	err := walk(dir, module, func(importPath string, fset *token.FileSet, f *ast.File) {
		for _, decl := range f.Decls {
			for _, d := range declLines(fset, decl) {
				lines = append(lines, "pkg "+importPath+", "+d)
			}
		}
	})
	slices.Sort(lines)
	return lines, err
}

// Undocumented returns, sorted, the exported top-level names (and methods
// of exported types) of the module's public packages that have no doc
// comment, as "path.Name" or "path.Type.Method". A name declared in a
// group is documented by the group's comment.
func Undocumented(dir, module string) ([]string, error) {
	var names []string
	err := walk(dir, module, func(importPath string, _ *token.FileSet, f *ast.File) {
		for _, decl := range f.Decls {
			for _, n := range undocumented(decl) {
				names = append(names, importPath+"."+n)
			}
		}
	})
	slices.Sort(names)
	return names, err
}

// walk calls visit for every file of the module's public packages: not
// internal, not main, not tests, not test data, and free of build
// constraints.
func walk(dir, module string, visit func(importPath string, fset *token.FileSet, f *ast.File)) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if skipDir(p, rel, d.Name()) {
			return filepath.SkipDir
		}
		return visitDir(p, path.Join(module, filepath.ToSlash(rel)), visit)
	})
}

// skipDir reports whether the directory p (rel from the module root) holds
// nothing public: internal packages, test data, hidden directories and
// nested modules.
func skipDir(p, rel, name string) bool {
	if rel == "." {
		return false
	}
	if name == "internal" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
		return true
	}
	_, err := os.Stat(filepath.Join(p, "go.mod"))
	return err == nil
}

// visitDir calls visit for each file of the package in dir, unless it is
// package main.
func visitDir(dir, importPath string, visit func(string, *token.FileSet, *ast.File)) error {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("apicheck: %w", err)
		}
		if f.Name.Name != "main" && buildsEverywhere(f) {
			visit(importPath, fset, f)
		}
	}
	return nil
}

// buildsEverywhere reports whether f has no build constraint (files for one
// platform or tag would make the listing depend on the machine).
func buildsEverywhere(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() >= f.Package {
			break
		}
		for _, c := range g.List {
			if strings.HasPrefix(c.Text, "//go:build") {
				return false
			}
		}
	}
	return true
}
