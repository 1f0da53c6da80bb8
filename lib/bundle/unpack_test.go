package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// entry is one member of a test archive; a body of nil with a positive
// size writes that many zero bytes.
type entry struct {
	typ  byte
	name string
	link string
	body string
	size int64
}

func file(name, body string) entry { return entry{typ: tar.TypeReg, name: name, body: body} }
func dir(name string) entry        { return entry{typ: tar.TypeDir, name: name} }
func symlink(name, target string) entry {
	return entry{typ: tar.TypeSymlink, name: name, link: target}
}
func hardlink(name, target string) entry {
	return entry{typ: tar.TypeLink, name: name, link: target}
}
func zeros(name string, n int64) entry { return entry{typ: tar.TypeReg, name: name, size: n} }

func targz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	zero := make([]byte, 64<<10)
	for _, e := range entries {
		h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: 0o644}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body)) + e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
		for n := e.size; n > 0; {
			k := min(n, int64(len(zero)))
			if _, err := tw.Write(zero[:k]); err != nil {
				t.Fatal(err)
			}
			n -= k
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// lyingHeader is an archive whose only header claims size bytes that the
// stream does not hold.
func lyingHeader(t *testing.T, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big", Size: size, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return buf.Bytes()
}

func TestUnpackRefuses(t *testing.T) {
	const limit = 1 << 20
	manyZeros := make([]entry, 40)
	for i := range manyZeros {
		manyZeros[i] = zeros("z"+strconv.Itoa(i), 256<<10)
	}
	cases := []struct {
		name     string
		archive  []byte
		entry    string
		reason   string
		maxEntry int
	}{
		{"absolute path", targz(t, file("/etc/passwd", "x")), "/etc/passwd", "absolute path", 0},
		{"dot dot", targz(t, file("../x", "x")), "../x", "path leaves the bundle directory", 0},
		{"dot dot after a name", targz(t, file("a/../../x", "x")), "a/../../x", "path leaves the bundle directory", 0},
		{"dot dot that stays inside", targz(t, file("a/../b", "x")), "a/../b", `path has a ".." component`, 0},
		{"deep escape", targz(t, file("../../etc/passwd", "x")), "../../etc/passwd", "path leaves the bundle directory", 0},
		{"symlink to /etc", targz(t, symlink("etc", "/etc")), "etc", `symlink target "/etc" is absolute`, 0},
		{"symlink to the parent, then a file through it",
			targz(t, symlink("a", ".."), file("a/x", "x")), "a", `symlink target ".." leaves the bundle directory`, 0},
		{"symlink leaving from a subdirectory",
			targz(t, symlink("d/up", "../../x")), "d/up", "leaves the bundle directory", 0},
		{"file through an inner symlink",
			targz(t, dir("b/"), symlink("a", "b"), file("a/x", "x")), "a/x", `path goes through the symlink "a"`, 0},
		{"directory through a symlink to the bundle",
			targz(t, symlink("a", "."), dir("a/d/")), "a/d/", `path goes through the symlink "a"`, 0},
		{"chain of symlinks that leads out",
			targz(t, symlink("a", "."), symlink("b", "a/..")), "b", "does not resolve inside the bundle directory", 0},
		{"dangling symlink", targz(t, symlink("a", "nowhere")), "a", "does not exist in the bundle", 0},
		{"hard link to outside", targz(t, hardlink("h", "../outside")), "h", `hard link target "../outside" leaves the bundle directory`, 0},
		{"hard link to an absolute path", targz(t, hardlink("h", "/etc/passwd")), "h", "is absolute", 0},
		{"hard link to nothing extracted", targz(t, hardlink("h", "later"), file("later", "x")), "h", "not a file extracted earlier", 0},
		{"hard link to a symlink", targz(t, file("f", "x"), symlink("s", "f"), hardlink("h", "s")), "h", "not a file extracted earlier", 0},
		{"character device", targz(t, entry{typ: tar.TypeChar, name: "null"}), "null", "character device entries are not allowed", 0},
		{"block device", targz(t, entry{typ: tar.TypeBlock, name: "sda"}), "sda", "block device entries are not allowed", 0},
		{"fifo", targz(t, entry{typ: tar.TypeFifo, name: "pipe"}), "pipe", "fifo entries are not allowed", 0},
		{"other type", targz(t, entry{typ: tar.TypeCont, name: "c"}), "c", "entry type '7' is not allowed", 0},
		{"duplicate file", targz(t, file("a", "1"), file("a", "2")), "a", "duplicate entry", 0},
		{"duplicate under another spelling", targz(t, file("a", "1"), file("./a", "2")), "./a", "duplicate entry", 0},
		{"file over a directory", targz(t, file("d/x", "1"), file("d", "2")), "d", "duplicate entry", 0},
		{"file under a file", targz(t, file("a", "1"), file("a/b", "2")), "a/b", `parent "a" is not a directory`, 0},
		{"size bomb", targz(t, manyZeros...), "z4", "the archive expands past the limit of 1048576 bytes", 0},
		{"one entry larger than the limit", targz(t, zeros("big", 10<<20)), "big", "size 10485760 bytes exceeds the limit of 1048576 bytes", 0},
		{"header claims more than the limit", lyingHeader(t, 1<<40), "big", "size 1099511627776 bytes exceeds the limit", 0},
		{"too many entries", targz(t, dir("a/"), dir("b/"), dir("c/"), dir("d/")), "d/", "more than 3 entries", 3},
	}
	for _, c := range cases {
		for _, pre := range []string{"absent", "empty"} {
			t.Run(c.name+"/"+pre, func(t *testing.T) {
				if c.maxEntry > 0 {
					old := maxEntries
					maxEntries = c.maxEntry
					defer func() { maxEntries = old }()
				}
				// Escapes would land in base, beside the bundle directory.
				base := filepath.Join(t.TempDir(), "base")
				os.Mkdir(base, 0o755)
				target := filepath.Join(base, "bundle")
				if pre == "empty" {
					os.Mkdir(target, 0o755)
				}
				err := Unpack(bytes.NewReader(c.archive), target, limit)
				var ue *UnsafeEntryError
				if !errors.As(err, &ue) {
					t.Fatalf("Unpack = %v, want an *UnsafeEntryError", err)
				}
				if ue.Name != c.entry || !strings.Contains(ue.Reason, c.reason) {
					t.Fatalf("refused %q for %q, want %q for %q", ue.Name, ue.Reason, c.entry, c.reason)
				}
				if !strings.HasPrefix(err.Error(), "bundle entry "+strconv.Quote(c.entry)+": ") {
					t.Errorf("message %q does not name the entry", err)
				}
				left := tree(t, filepath.Dir(base))
				want := map[string]string{"base": "dir"}
				if pre == "empty" {
					want["base/bundle"] = "dir"
				}
				if len(left) != len(want) || left["base"] != "dir" || (pre == "empty") != (left["base/bundle"] == "dir") {
					var paths []string
					for p := range left {
						paths = append(paths, p)
					}
					sort.Strings(paths)
					t.Fatalf("after the refusal the directory holds %q, want only %v", paths, want)
				}
			})
		}
	}
}

func TestUnsafeEntryErrorMessage(t *testing.T) {
	err := Unpack(bytes.NewReader(targz(t, file("../../etc/passwd", "root"))), t.TempDir(), 1<<20)
	want := `bundle entry "../../etc/passwd": path leaves the bundle directory`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %s", err, want)
	}
}

func TestUnpackAccepts(t *testing.T) {
	archive := targz(t,
		dir("./"),
		file("./manifest.json", "{}"),
		file("media/ab/x.png", "png"), // parents not listed
		dir("media/"),                 // and listed afterwards
		symlink("media/latest", "ab/x.png"),
		symlink("self", "."),
		hardlink("copy.png", "media/ab/x.png"),
		zeros("exact", 1<<20-int64(len("{}png"))),
	)
	out := filepath.Join(t.TempDir(), "bundle")
	if err := Unpack(bytes.NewReader(archive), out, 1<<20); err != nil {
		t.Fatal(err)
	}
	got := tree(t, out)
	want := map[string]string{
		"manifest.json":  "{}",
		"media":          "dir",
		"media/ab":       "dir",
		"media/ab/x.png": "png",
		"media/latest":   "link -> ab/x.png",
		"self":           "link -> .",
		"copy.png":       "png",
	}
	for p, v := range want {
		if got[filepath.FromSlash(p)] != v {
			t.Errorf("%s = %q, want %q", p, got[p], v)
		}
	}
	if len(got["exact"]) != 1<<20-5 {
		t.Errorf("exact has %d bytes", len(got["exact"]))
	}
}

func TestUnpackNotEmpty(t *testing.T) {
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, "keep"), []byte("mine"), 0o644)
	err := Unpack(bytes.NewReader(targz(t, file("a", "x"))), out, 1<<20)
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Unpack into a non-empty directory = %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(out, "keep")); err != nil || string(b) != "mine" {
		t.Errorf("the existing file was touched: %q, %v", b, err)
	}
}

func TestUnpackCorrupt(t *testing.T) {
	good := targz(t, file("a", strings.Repeat("x", 4096)), file("b", "y"))
	cases := []struct {
		name    string
		archive []byte
	}{
		{"not gzip", []byte("plain text")},
		{"truncated", good[:len(good)/2]},
		{"bad checksum", append(append([]byte{}, good[:len(good)-8]...), 0, 0, 0, 0, 0, 0, 0, 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "bundle")
			if err := Unpack(bytes.NewReader(c.archive), out, 1<<20); err == nil {
				t.Fatal("Unpack succeeded")
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("the bundle directory is left behind: %v", err)
			}
		})
	}
}

func TestUnpackFile(t *testing.T) {
	archive := targz(t, file("a", "x"))
	sum := sha256.Sum256(archive)
	good := hex.EncodeToString(sum[:])
	p := filepath.Join(t.TempDir(), "bundle.tar.gz")
	if err := os.WriteFile(p, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		sha     string
		wantErr bool
	}{
		{"no checksum", "", false},
		{"right checksum", good, false},
		{"right checksum in capitals", strings.ToUpper(good), false},
		{"wrong checksum", strings.Repeat("0", 64), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "bundle")
			err := UnpackFile(p, out, 1<<20, c.sha)
			if c.wantErr {
				if !errors.Is(err, ErrChecksum) {
					t.Fatalf("UnpackFile = %v, want ErrChecksum", err)
				}
				if _, err := os.Stat(out); !os.IsNotExist(err) {
					t.Errorf("something was extracted despite the checksum: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(filepath.Join(out, "a")); err != nil || string(b) != "x" {
				t.Errorf("a = %q, %v", b, err)
			}
		})
	}
}
