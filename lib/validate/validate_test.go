package validate

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Every config of Potato's own example projects validates without errors:
// their many keys belong to Potato (SPEC V6).
func TestPotatoExamples(t *testing.T) {
	root := filepath.Join("..", "..", "testdata", "potato-examples")
	n := 0
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() || filepath.Ext(p) != ".yaml" || !isConfig(p) {
			return nil
		}
		n++
		_, r, err := File(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		if len(r.Errors) > 0 || len(r.Warnings) > 0 {
			t.Errorf("%s: %+v", p, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Fatalf("found only %d example configs under %s", n, root)
	}
}

func isConfig(p string) bool {
	data, err := os.ReadFile(p)
	return err == nil && (bytes.Contains(data, []byte("annotation_schemes")) || bytes.Contains(data, []byte("annotation_task_name")))
}
