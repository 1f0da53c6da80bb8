package atomicfile_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// renamers are the files outside this package that may call os.Rename,
// with why theirs is no hand-made temp-and-rename writer.
var renamers = map[string]string{
	"lib/rundir/retain.go":       "a run directory moved aside before it is removed",
	"lib/backend/local/local.go": "the trainer's finished predictions moved into the run directory, whole",
}

// TestTheOnlyAtomicWriter: no program file in lib/ or cmd/ but this
// package's and the renamers' calls os.Rename, so that every file replaced
// in place goes through atomicfile (issue: one atomic writer).
func TestTheOnlyAtomicWriter(t *testing.T) {
	root := filepath.Join("..", "..")
	seen := map[string]bool{}
	for _, top := range []string{"lib", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			if strings.HasPrefix(rel, "lib/atomicfile/") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Rename" {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "os" {
					if _, ok := renamers[rel]; !ok {
						t.Errorf("%s calls os.Rename: replace a file with atomicfile, or say in renamers why this is no replacement", rel)
					}
					seen[rel] = true
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for f := range renamers {
		if !seen[f] {
			t.Errorf("%s no longer calls os.Rename: remove it from renamers", f)
		}
	}
}
