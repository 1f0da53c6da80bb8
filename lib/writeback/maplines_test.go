package writeback

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mapLines writes what fn makes of every line that is not blank, in line
// order, over batches handled by several goroutines at once; the first
// error in line order stops it, named with its line.
func TestMapLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lines.jsonl")
	var in, want bytes.Buffer
	for i := range 40000 {
		fmt.Fprintf(&in, "line %d %s\n", i, strings.Repeat("x", i%50))
		fmt.Fprintf(&want, "LINE %d %s|", i, strings.Repeat("X", i%50))
		if i%1000 == 0 {
			in.WriteString("  \n") // blank: skipped
		}
	}
	if err := os.WriteFile(path, in.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	upper := func() func(line, dst []byte) ([]byte, error) {
		return func(line, dst []byte) ([]byte, error) {
			return append(append(dst, bytes.ToUpper(line)...), '|'), nil
		}
	}
	for _, threads := range []int{1, 2, 4} {
		var out bytes.Buffer
		if err := mapLines(path, threads, &out, upper); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), want.Bytes()) {
			t.Fatalf("%d goroutines: %d bytes out, want %d", threads, out.Len(), want.Len())
		}
	}

	bad := errors.New("bad line")
	failing := func() func(line, dst []byte) ([]byte, error) {
		return func(line, dst []byte) ([]byte, error) {
			if bytes.HasPrefix(line, []byte("line 30000 ")) || bytes.HasPrefix(line, []byte("line 39000 ")) {
				return dst, bad
			}
			return append(dst, '.'), nil
		}
	}
	var out bytes.Buffer
	err := mapLines(path, 2, &out, failing)
	// Item 30000 is line 30031 of the file: lines count from 1, and 30
	// blank lines come before it.
	if !errors.Is(err, bad) || !strings.Contains(err.Error(), "line 30031:") {
		t.Fatalf("error %v, want bad line at line 30031", err)
	}
	if out.Len() > 30000 || out.Len() == 0 {
		t.Errorf("%d lines written before the error at the 30001st", out.Len())
	}
}
