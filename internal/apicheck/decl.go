package apicheck

import (
	"bytes"
	"go/ast"
	"go/printer"
	"go/token"
	"strings"
)

// declLines returns one line per exported name that decl declares.
func declLines(fset *token.FileSet, decl ast.Decl) []string {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		return funcLine(fset, d)
	case *ast.GenDecl:
		var lines []string
		for _, spec := range d.Specs {
			lines = append(lines, specLines(fset, d.Tok, spec)...)
		}
		return lines
	}
	return nil
}

// funcLine lists an exported function, or an exported method of an
// exported type, without its body.
func funcLine(fset *token.FileSet, d *ast.FuncDecl) []string {
	if !d.Name.IsExported() {
		return nil
	}
	prefix := "func "
	if d.Recv != nil && len(d.Recv.List) == 1 {
		recv := d.Recv.List[0].Type
		if !ast.IsExported(receiverName(recv)) {
			return nil
		}
		prefix = "method (" + node(fset, recv) + ") "
	}
	return []string{prefix + d.Name.Name + strings.TrimPrefix(node(fset, d.Type), "func")}
}

// receiverName is the name of a receiver's type: T of T, *T or T[P].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// specLines lists the exported names of one const, var or type spec; a
// struct lists each exported field, an interface each method, on lines of
// their own.
func specLines(fset *token.FileSet, tok token.Token, spec ast.Spec) []string {
	switch s := spec.(type) {
	case *ast.ValueSpec:
		var lines []string
		for _, n := range s.Names {
			if !n.IsExported() {
				continue
			}
			line := strings.ToLower(tok.String()) + " " + n.Name
			if s.Type != nil {
				line += " " + node(fset, s.Type)
			}
			lines = append(lines, line)
		}
		return lines
	case *ast.TypeSpec:
		if !s.Name.IsExported() {
			return nil
		}
		return typeLines(fset, s)
	}
	return nil
}

// typeLines lists an exported type: its kind, then its exported fields or
// methods.
func typeLines(fset *token.FileSet, s *ast.TypeSpec) []string {
	name := "type " + s.Name.Name
	if s.TypeParams != nil {
		var params []string
		for _, f := range s.TypeParams.List {
			var names []string
			for _, n := range f.Names {
				names = append(names, n.Name)
			}
			params = append(params, strings.Join(names, ", ")+" "+node(fset, f.Type))
		}
		name += "[" + strings.Join(params, ", ") + "]"
	}
	assign := " "
	if s.Assign.IsValid() {
		assign = " = "
	}
	switch t := s.Type.(type) {
	case *ast.StructType:
		name += " struct"
		lines := []string{name}
		for _, f := range t.Fields.List {
			typ := node(fset, f.Type)
			if len(f.Names) == 0 && ast.IsExported(receiverName(f.Type)) {
				lines = append(lines, name+", embedded "+typ)
			}
			for _, n := range f.Names {
				if n.IsExported() {
					lines = append(lines, name+", "+n.Name+" "+typ)
				}
			}
		}
		return lines
	case *ast.InterfaceType:
		name += " interface"
		lines := []string{name}
		for _, m := range t.Methods.List {
			if len(m.Names) == 0 {
				lines = append(lines, name+", embedded "+node(fset, m.Type))
			}
			for _, n := range m.Names {
				if n.IsExported() {
					lines = append(lines, name+", "+n.Name+strings.TrimPrefix(node(fset, m.Type), "func"))
				}
			}
		}
		return lines
	}
	return []string{name + assign + node(fset, s.Type)}
}

// node prints n on one line.
func node(fset *token.FileSet, n ast.Node) string {
	var b bytes.Buffer
	_ = printer.Fprint(&b, fset, n)
	return strings.Join(strings.Fields(b.String()), " ")
}

// undocumented returns the exported names decl declares without a doc
// comment.
func undocumented(decl ast.Decl) []string {
	switch d := decl.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() || d.Doc != nil {
			return nil
		}
		if d.Recv != nil && len(d.Recv.List) == 1 {
			recv := receiverName(d.Recv.List[0].Type)
			if !ast.IsExported(recv) {
				return nil
			}
			return []string{recv + "." + d.Name.Name}
		}
		return []string{d.Name.Name}
	case *ast.GenDecl:
		if d.Doc != nil && d.Lparen.IsValid() {
			return nil // a group's comment documents its names
		}
		var names []string
		for _, spec := range d.Specs {
			names = append(names, undocumentedSpec(spec, d.Doc != nil)...)
		}
		return names
	}
	return nil
}

func undocumentedSpec(spec ast.Spec, declDoc bool) []string {
	switch s := spec.(type) {
	case *ast.TypeSpec:
		if s.Name.IsExported() && s.Doc == nil && !declDoc {
			return []string{s.Name.Name}
		}
	case *ast.ValueSpec:
		if s.Doc != nil || s.Comment != nil || declDoc {
			return nil
		}
		var names []string
		for _, n := range s.Names {
			if n.IsExported() {
				names = append(names, n.Name)
			}
		}
		return names
	}
	return nil
}
