package components

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestNoKindSwitchOutsideComponents keeps the registry the only way to
// know the kinds: outside the kinds' own packages and this list, no
// non-test code compares a string with a kind's name (in a switch case or
// with == or !=). A new kind then touches only its package and all.go.
func TestNoKindSwitchOutsideComponents(t *testing.T) {
	const module = "github.com/weir-io/weir/"
	r := Registry()
	names := map[string]bool{}
	for _, n := range append(r.SinkNames(), r.SourceNames()...) {
		names[n] = true
	}
	// The kinds' packages are the ones all.go imports.
	fset := token.NewFileSet()
	all, err := parser.ParseFile(fset, "all.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"internal/components"}
	for _, imp := range all.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if strings.HasPrefix(p, module) && p != module+"internal/component" {
			allowed = append(allowed, strings.TrimPrefix(p, module))
		}
	}
	if len(allowed) < 3 {
		t.Fatalf("kind packages from all.go: %v", allowed)
	}
	root := filepath.Join("..", "..")
	var hits []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || slices.Contains(allowed, rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		kindString := func(e ast.Expr) bool {
			lit, ok := e.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return false
			}
			s, _ := strconv.Unquote(lit.Value)
			return names[s]
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var bad []ast.Expr
			switch n := n.(type) {
			case *ast.CaseClause:
				bad = n.List
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					bad = []ast.Expr{n.X, n.Y}
				}
			}
			for _, e := range bad {
				if kindString(e) {
					hits = append(hits, fset.Position(e.Pos()).String())
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The test helpers compare a DSN's URL scheme, not a kind.
	hits = slices.DeleteFunc(hits, func(h string) bool {
		return strings.HasPrefix(filepath.ToSlash(h), path.Join("..", "..", "internal/testenv")+"/")
	})
	for _, h := range hits {
		t.Errorf("%s: compares a string with a kind name; read the component registry instead", h)
	}
}
