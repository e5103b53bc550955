package failpoints

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMarkersMatchRegistry scans the module's sources and checks that every
// failpoint marker is registered, under its own package's short name, in a
// file of the same package guarded by "//go:build failpoint"; that every
// registration has its marker; and that every marker body starts with
// failpoints.Hit(<its short name>). A misspelled name fails here, not in a
// campaign that silently never fires.
func TestMarkersMatchRegistry(t *testing.T) {
	type site struct{ dir, pos string }
	markers := map[string]site{}
	regs := map[string]site{}
	fset := token.NewFileSet()
	root := ".."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			n := d.Name()
			if path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" || n == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		fpName, fpsName := "", ""
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			local := p[strings.LastIndex(p, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			switch p {
			case "github.com/pingcap/failpoint":
				fpName = local
			case Module + "/failpoints":
				fpsName = local
			}
		}
		tagged := false
		for _, cg := range f.Comments {
			if cg.Pos() > f.Package {
				break
			}
			for _, c := range cg.List {
				if strings.TrimSpace(c.Text) == "//go:build failpoint" {
					tagged = true
				}
			}
		}
		isPkg := func(e ast.Expr, pkg, sel string) bool {
			s, ok := e.(*ast.SelectorExpr)
			if !ok || s.Sel.Name != sel {
				return false
			}
			id, ok := s.X.(*ast.Ident)
			return ok && pkg != "" && id.Name == pkg
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if n == nil {
				return false
			}
			pos := fset.Position(n.Pos()).String()
			switch n := n.(type) {
			case *ast.CallExpr:
				if !isPkg(n.Fun, fpName, "Inject") && !isPkg(n.Fun, fpName, "InjectContext") {
					return true
				}
				args := n.Args
				if isPkg(n.Fun, fpName, "InjectContext") {
					args = args[1:]
				}
				lit, ok := args[0].(*ast.BasicLit)
				if !assert.True(t, ok && lit.Kind == token.STRING, "%s: marker name must be a string literal", pos) {
					return true
				}
				name, _ := strconv.Unquote(lit.Value)
				short := rel + "/" + name
				assert.NotContains(t, markers, short, "%s: marker %q twice", pos, short)
				markers[short] = site{rel, pos}
				body, ok := args[1].(*ast.FuncLit)
				if !assert.True(t, ok && len(body.Body.List) > 0, "%s: marker body must be a func literal", pos) {
					return true
				}
				call, ok := body.Body.List[0].(*ast.ExprStmt)
				var hit string
				if ok {
					if c, ok := call.X.(*ast.CallExpr); ok && isPkg(c.Fun, fpsName, "Hit") && len(c.Args) == 1 {
						if l, ok := c.Args[0].(*ast.BasicLit); ok {
							hit, _ = strconv.Unquote(l.Value)
						}
					}
				}
				assert.Equal(t, short, hit, "%s: the body of marker %q must start with failpoints.Hit(%q)", pos, name, short)
			case *ast.CompositeLit:
				if !isPkg(n.Type, fpsName, "Def") {
					return true
				}
				for _, el := range n.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok || kv.Key.(*ast.Ident).Name != "Name" {
						continue
					}
					lit, ok := kv.Value.(*ast.BasicLit)
					if !assert.True(t, ok, "%s: Def.Name must be a string literal", pos) {
						continue
					}
					name, _ := strconv.Unquote(lit.Value)
					assert.True(t, tagged, "%s: registration of %q in a file without //go:build failpoint", pos, name)
					regs[name] = site{rel, pos}
				}
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, markers, "the scan found no marker at all (fptest has some)")
	for name, m := range markers {
		r, ok := regs[name]
		if assert.True(t, ok, "%s: marker %q is not registered (failpoints.Register in a //go:build failpoint file of its package)", m.pos, name) {
			assert.Equal(t, m.dir, r.dir, "%s: %q registered outside its package", r.pos, name)
		}
	}
	for name, r := range regs {
		assert.Contains(t, markers, name, "%s: registered failpoint %q has no marker", r.pos, name)
	}
}
