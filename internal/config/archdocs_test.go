package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The architecture documents point into the code: file paths, `file.go`
// names in a package, and the functions, types and methods that keep each
// rule. TestArchitecturePointers checks that every such pointer in
// docs/architecture.md and in internal/engine's invariant map
// (internal/engine/doc.go) still resolves, so a rename cannot leave them
// naming what no longer exists.

const repoRoot = "../.."

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// A path into the repository: a/b, a/b.go, or a bare name.go.
	pathLike = regexp.MustCompile(`^(?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+/?$|^[A-Za-z0-9_-]+\.go$`)
	// An identifier pointer: Name, or Type.Method (pkg.Name).
	identLike  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?$`)
	qualified  = regexp.MustCompile(`^[a-z][a-z0-9]*\.[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?$`)
	leadIdents = regexp.MustCompile("^(?:`[A-Za-z_][A-Za-z0-9_.]*`(?:, | and | / |/)?)+")
)

// decls is what a Go file or package declares: top-level names, methods,
// struct fields and interface methods as Type.Name, and top-level names
// as pkg.Name too.
type decls map[string]bool

var declCache = map[string]decls{}

// declsOf parses path, a .go file or a package directory (its non-test
// files).
func declsOf(t *testing.T, path string) decls {
	t.Helper()
	if d, ok := declCache[path]; ok {
		return d
	}
	files := []string{path}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		files, _ = filepath.Glob(filepath.Join(path, "*.go"))
	}
	d := decls{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") && f != path {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", f, err)
		}
		top := func(name string) { d[name], d[af.Name.Name+"."+name] = true, true }
		for _, decl := range af.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					top(decl.Name.Name)
					continue
				}
				d[decl.Name.Name] = true
				if recv := recvName(decl.Recv.List[0].Type); recv != "" {
					d[recv+"."+decl.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						top(spec.Name.Name)
						var members *ast.FieldList // fields, or an interface's methods
						switch typ := spec.Type.(type) {
						case *ast.StructType:
							members = typ.Fields
						case *ast.InterfaceType:
							members = typ.Methods
						}
						if members != nil {
							for _, f := range members.List {
								for _, n := range f.Names {
									d[spec.Name.Name+"."+n.Name] = true
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							top(n.Name)
						}
					}
				}
			}
		}
	}
	declCache[path] = d
	return d
}

var pkgDirs map[string][]string

// packageDirs maps each package name of the module (its directory's
// name) to its directories.
func packageDirs(t *testing.T) map[string][]string {
	t.Helper()
	if pkgDirs != nil {
		return pkgDirs
	}
	pkgDirs = map[string][]string{}
	err := filepath.WalkDir(repoRoot, func(path string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && (strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata") && path != repoRoot {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir := filepath.Dir(path)
			name := filepath.Base(dir)
			if !slices.Contains(pkgDirs[name], dir) {
				pkgDirs[name] = append(pkgDirs[name], dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgDirs
}

// allPackageDirs is every package directory of the module.
func allPackageDirs(t *testing.T) []string {
	var all []string
	for _, dirs := range packageDirs(t) {
		all = append(all, dirs...)
	}
	return all
}

// isKnob reports whether s is a configuration key (flow.admission_wait),
// which looks like a Go pointer and is not one.
func isKnob(s string) bool {
	for _, k := range knobs() {
		if k.Key == s {
			return true
		}
	}
	return false
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.IndexListExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// resolve finds a path pointer: from the repository root, or from base
// (the package the text is about); "" when it names nothing.
func resolve(p, base string) string {
	var tries []string
	if strings.Contains(p, "/") {
		tries = append(tries, filepath.Join(repoRoot, p))
	}
	if base != "" {
		tries = append(tries, filepath.Join(base, p))
	}
	for _, try := range tries {
		if _, err := os.Stat(try); err == nil {
			return try
		}
	}
	return ""
}

// parenIdents is the identifiers a parenthesis right after a pointer
// names: the leading `Name`s of each ;-separated part, before any prose.
func parenIdents(rest string) []string {
	if !strings.HasPrefix(rest, " (") {
		return nil
	}
	depth, end := 0, -1
	for i, r := range rest[1:] {
		if r == '(' {
			depth++
		} else if r == ')' {
			if depth--; depth == 0 {
				end = i + 1
				break
			}
		}
	}
	if end < 0 {
		return nil
	}
	var out []string
	for _, part := range strings.Split(rest[2:end], ";") {
		lead := leadIdents.FindString(strings.TrimSpace(part))
		for _, m := range backticked.FindAllStringSubmatch(lead, -1) {
			if identLike.MatchString(m[1]) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// pointerProblems checks one line of docs/architecture.md; base is the
// package directory last named, against which bare file names resolve.
func pointerProblems(t *testing.T, line string, base *string) []string {
	var problems []string
	for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
		target, _, _ := strings.Cut(m[1], "#")
		if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		if _, err := os.Stat(filepath.Join(repoRoot, "docs", target)); err != nil {
			problems = append(problems, "link to "+m[1]+": no such file")
		}
	}
	for _, loc := range backticked.FindAllStringSubmatchIndex(line, -1) {
		tok, rest := line[loc[2]:loc[3]], line[loc[1]:]
		var target string
		switch {
		case pathLike.MatchString(tok):
			if target = resolve(strings.TrimSuffix(tok, "/"), *base); target == "" {
				problems = append(problems, "`"+tok+"`: no such file or directory")
				continue
			}
			if fi, err := os.Stat(target); err == nil && fi.IsDir() {
				*base = target
			}
		case identLike.MatchString(tok) && strings.HasPrefix(rest, " in "):
			// `Name` in file.go, or in [file.go](../file.go).
			if m := regexp.MustCompile("^ in (?:`([^`]+\\.go)`|\\[[^]]*\\]\\(([^)]+\\.go)\\))").FindStringSubmatch(rest); m != nil {
				f := resolve(m[1], *base)
				if m[2] != "" {
					f = filepath.Join(repoRoot, "docs", m[2])
				}
				if f != "" && !declsOf(t, f)[tok] {
					problems = append(problems, "`"+tok+"` is not declared in "+f)
				}
			}
			continue
		case qualified.MatchString(tok) && !isKnob(tok):
			// pkg.Name or pkg.Type.Member of a package of the module, or
			// type.member of any of them (conn.answerOwn).
			pkg, member, _ := strings.Cut(tok, ".")
			dirs, what := packageDirs(t)[pkg], "package "+pkg
			if len(dirs) == 0 {
				dirs, member, what = allPackageDirs(t), tok, "any package"
			}
			found := false
			for _, dir := range dirs {
				found = found || declsOf(t, dir)[member]
			}
			if !found {
				problems = append(problems, "`"+tok+"`: not declared in "+what)
			}
			continue
		default:
			continue
		}
		for _, id := range parenIdents(rest) {
			if !declsOf(t, target)[id] {
				problems = append(problems, "`"+tok+"` (`"+id+"`): not declared there")
			}
		}
	}
	return problems
}

func TestArchitecturePointers(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	var base string
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			base = "" // a bare file name belongs to the package its section names
		}
		for _, p := range pointerProblems(t, line, &base) {
			t.Errorf("docs/architecture.md:%d: %s", i+1, p)
		}
	}
}

// TestEngineInvariantMap checks internal/engine's package comment: every
// file it lists or names exists in the package, and each name it gives a
// file — the list's leading names, "Name (file.go)", "Name in file.go" —
// is declared in that file.
func TestEngineInvariantMap(t *testing.T) {
	dir := filepath.Join(repoRoot, "internal", "engine")
	fset := token.NewFileSet()
	af, err := parser.ParseFile(fset, filepath.Join(dir, "doc.go"), nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := af.Doc.Text()
	missing := map[string]bool{}
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			if !missing[name] {
				t.Errorf("internal/engine/doc.go names %s: no such file in internal/engine", name)
			}
			missing[name] = true
			return ""
		}
		return p
	}
	check := func(id, name string) {
		if p := file(name); p != "" && !declsOf(t, p)[id] {
			t.Errorf("internal/engine/doc.go: %s is not declared in %s", id, name)
		}
	}
	listed := regexp.MustCompile(`(?m)^\t([a-z0-9_]+\.go)\s+(.*)$`)
	leading := regexp.MustCompile(`^(?:([A-Z][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)(?:, | and | / |$|:| \())+`)
	name := regexp.MustCompile(`[A-Z][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?`)
	files := 0
	for _, m := range listed.FindAllStringSubmatch(doc, -1) {
		files++
		lead := leading.FindString(m[2])
		for _, id := range name.FindAllString(lead, -1) {
			check(id, m[1])
		}
		if lead == "" {
			file(m[1])
		}
	}
	if files == 0 {
		t.Fatal("internal/engine/doc.go lists no files: the map's layout changed, update this test")
	}
	prose := strings.Join(strings.Fields(doc), " ")
	for _, m := range regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?) (?:\(|in )([a-z0-9_]+\.go)\b`).FindAllStringSubmatch(prose, -1) {
		if id := m[1]; strings.Contains(id, ".") || (id[0] >= 'A' && id[0] <= 'Z') {
			check(id, m[2])
		}
	}
	for _, m := range regexp.MustCompile(`\b[a-z0-9_]+\.go\b`).FindAllString(prose, -1) {
		file(m)
	}
}
