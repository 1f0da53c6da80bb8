package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated part of man/potato-config.5")

// The key table of potato-config(5) is made from the Go key tables; the
// committed page must match them ("make man" rewrites it).
func TestManPageKeys(t *testing.T) {
	path := filepath.Join("..", "..", "man", "potato-config.5")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	i, j := strings.Index(page, ManBegin+"\n"), strings.Index(page, ManEnd+"\n")
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", path, ManBegin, ManEnd)
	}
	start := i + len(ManBegin) + 1
	want := ManKeyTables()
	if page[start:j] == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(page[:start]+want+page[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date with lib/config/keys.go: run make man", path)
}
