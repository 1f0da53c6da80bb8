package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// packedBundle is a test bundle with, besides the writer's files, a symlink
// to a file inside it and media placed as a symlink to a file outside it.
func packedBundle(t *testing.T) string {
	t.Helper()
	fx := newFixture(t)
	symlinkFile = func(string, string) error { return os.ErrPermission }
	linkFile = func(src, dst string) error { return os.Symlink(src, dst) }
	defer func() { linkFile, symlinkFile = os.Link, os.Symlink }()
	dir := filepath.Join(t.TempDir(), "bundle")
	writeBundle(t, dir, fx, "one")
	if err := os.Symlink("../train.jsonl", filepath.Join(dir, "media", "train-link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tree maps each path under dir to what is there: "dir", "link -> target"
// or the file's content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			out[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link -> " + target
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPackDeterministic(t *testing.T) {
	dir := packedBundle(t)
	var a, b bytes.Buffer
	shaA, nA, err := Pack(dir, &a)
	if err != nil {
		t.Fatal(err)
	}
	// Times and permissions on disk do not reach the archive.
	later := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(dir, "train.jsonl"), later, later)
	os.Chmod(filepath.Join(dir, "val.jsonl"), 0o600)
	shaB, nB, err := Pack(dir, &b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) || shaA != shaB || nA != nB {
		t.Fatalf("two packs differ: %s (%d bytes) and %s (%d bytes)", shaA, nA, shaB, nB)
	}
	sum := sha256.Sum256(a.Bytes())
	if shaA != hex.EncodeToString(sum[:]) || nA != int64(a.Len()) {
		t.Errorf("Pack reports %s, %d; the archive is %x, %d bytes", shaA, nA, sum, a.Len())
	}

	dst := filepath.Join(t.TempDir(), "bundle.tar.gz")
	shaF, nF, err := PackFile(dir, dst)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.ReadFile(dst)
	if shaF != shaA || nF != nA || !bytes.Equal(f, a.Bytes()) {
		t.Errorf("PackFile wrote %s, %d bytes; Pack %s, %d", shaF, nF, shaA, nA)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dst), ".bundle.tar.gz.tmp")); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left behind: %v", err)
	}

	// The entries: sorted, fixed modes and times, no owner.
	zr, err := gzip.NewReader(bytes.NewReader(a.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header has name %q, time %v", zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		wantMode := map[byte]int64{tar.TypeReg: 0o644, tar.TypeDir: 0o755, tar.TypeSymlink: 0o777}[h.Typeflag]
		if h.Mode != wantMode || h.ModTime.Unix() != 0 || h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: mode %o, time %v, owner %d/%d %q", h.Name, h.Mode, h.ModTime, h.Uid, h.Gid, h.Uname)
		}
	}
	for i := 1; i < len(names); i++ {
		if strings.TrimSuffix(names[i-1], "/") >= strings.TrimSuffix(names[i], "/") {
			t.Errorf("entries out of order: %q before %q", names[i-1], names[i])
		}
	}
}

func TestPackUnpackRoundTrip(t *testing.T) {
	dir := packedBundle(t)
	var buf bytes.Buffer
	if _, _, err := Pack(dir, &buf); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "x", "bundle")
	if err := Unpack(bytes.NewReader(buf.Bytes()), out, 1<<20); err != nil {
		t.Fatal(err)
	}
	before, after := tree(t, dir), tree(t, out)
	outside := 0
	for p, v := range before {
		if strings.HasPrefix(v, "link -> /") {
			outside++
			// Media linked from outside the bundle comes back as the file.
			target := strings.TrimPrefix(v, "link -> ")
			b, _ := os.ReadFile(target)
			v = string(b)
		}
		if after[p] != v {
			t.Errorf("%s: %q after the round trip, want %q", p, after[p], v)
		}
	}
	if outside != 1 {
		t.Errorf("the bundle has %d media symlinks to outside files, want 1", outside)
	}
	if len(after) != len(before) {
		t.Errorf("%d paths after the round trip, %d before", len(after), len(before))
	}
	if after[filepath.Join("media", "train-link")] != "link -> ../train.jsonl" {
		t.Errorf("the inner symlink is not kept: %q", after[filepath.Join("media", "train-link")])
	}
	if err := Verify(out); err != nil {
		t.Errorf("Verify after the round trip: %v", err)
	}

	// A second pack of the unpacked bundle is the same archive.
	var again bytes.Buffer
	if _, _, err := Pack(out, &again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Bytes(), buf.Bytes()) {
		t.Error("packing the unpacked bundle gives a different archive")
	}
}

func TestPackRefuses(t *testing.T) {
	cases := []struct {
		name string
		make func(dir string) error
		want string
	}{
		{"dangling symlink", func(dir string) error {
			return os.Symlink("nowhere", filepath.Join(dir, "l"))
		}, "symlink \"l\""},
		{"symlink to a directory outside", func(dir string) error {
			return os.Symlink(os.TempDir(), filepath.Join(dir, "l"))
		}, "not a regular file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := c.make(dir); err != nil {
				t.Fatal(err)
			}
			_, _, err := Pack(dir, io.Discard)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Pack = %v, want an error containing %q", err, c.want)
			}
		})
	}
	dir := t.TempDir()
	if _, _, err := PackFile(dir, filepath.Join(dir, "b.tar.gz")); err == nil {
		t.Error("PackFile into the bundle itself succeeded")
	}
}
