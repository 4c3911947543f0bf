package switchml

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// maxSessionMethods bounds the methods declared on Session, exported and
// unexported: it is the front of the job client and the executors, not
// where their work is done.
const maxSessionMethods = 30

// parseLibrary parses the non-test files of the package in dir.
func parseLibrary(t *testing.T, dir string) ([]*ast.File, *token.FileSet) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files, fset
}

// methodsOf lists the methods declared on the named type (by value or
// pointer receiver) in files.
func methodsOf(files []*ast.File, typ string) []string {
	var names []string
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			rt := fn.Recv.List[0].Type
			if star, ok := rt.(*ast.StarExpr); ok {
				rt = star.X
			}
			if id, ok := rt.(*ast.Ident); ok && id.Name == typ {
				names = append(names, fn.Name.Name)
			}
		}
	}
	return names
}

// TestSessionIsASmallFront: Session hands its work to the job client and
// the executors; a method count above maxSessionMethods means work
// crept back into it.
func TestSessionIsASmallFront(t *testing.T) {
	files, _ := parseLibrary(t, ".")
	if n := len(methodsOf(files, "Session")); n > maxSessionMethods {
		t.Errorf("Session has %d methods, at most %d: give the work to the job client or an executor", n, maxSessionMethods)
	}
}

// TestTheShapeCheckCounts: the count above sees methods by value and
// by pointer, and nothing else.
func TestTheShapeCheckCounts(t *testing.T) {
	src := "package p\ntype Session struct{}\nfunc (s *Session) A() {}\nfunc (Session) b() {}\nfunc (s *other) C() {}\nfunc D() {}\n"
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := methodsOf([]*ast.File{f}, "Session"); len(got) != 2 {
		t.Errorf("counted %v, want A and b", got)
	}
}

// TestNoConcreteTransports: the library asks a lane's socket what it
// can do (transport.Carrier, transport.InPlaceWriter), never which
// transport's type it is.
func TestNoConcreteTransports(t *testing.T) {
	dirs := []string{"."}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != "testdata" {
			dirs = append(dirs, e.Name())
		}
	}
	for _, dir := range dirs {
		files, fset := parseLibrary(t, dir)
		for _, f := range files {
			// The local names of the transports' own packages.
			concrete := map[string]bool{}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !strings.Contains(path, "/transport/") {
					continue
				}
				name := path[strings.LastIndex(path, "/")+1:]
				if imp.Name != nil {
					name = imp.Name.Name
				}
				concrete[name] = true
			}
			check := func(e ast.Expr) {
				at := fset.Position(e.Pos())
				if star, ok := e.(*ast.StarExpr); ok {
					e = star.X
				}
				if sel, ok := e.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && concrete[id.Name] {
						t.Errorf("%s:%d: asks for %s.%s: ask a capability of package transport instead", at.Filename, at.Line, id.Name, sel.Sel.Name)
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.TypeAssertExpr:
					if n.Type != nil {
						check(n.Type)
					}
				case *ast.TypeSwitchStmt:
					for _, c := range n.Body.List {
						for _, e := range c.(*ast.CaseClause).List {
							check(e)
						}
					}
				}
				return true
			})
		}
	}
}
