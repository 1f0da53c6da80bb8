package bundle

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// stream is a tree stream made by hand: a global header with total
// (unless total is negative), then the entries. An entry of type 'D' is a
// file sent apart of e.size bytes.
func stream(t *testing.T, total int64, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if total >= 0 {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "tree",
			PAXRecords: map[string]string{TotalRecord: strconv.FormatInt(total, 10)}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range entries {
		h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: 0o644}
		switch e.typ {
		case tar.TypeReg:
			h.Size = int64(len(e.body)) + e.size
		case 'D':
			h.Typeflag = tar.TypeReg
			h.PAXRecords = map[string]string{DirectRecord: strconv.FormatInt(e.size, 10)}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
			tw.Write(make([]byte, e.size))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// files lists what dir holds, name -> content, temporary names included.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dir, p)
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	return out
}

func TestUnpackStreamRefuses(t *testing.T) {
	outside := t.TempDir()
	cases := []struct {
		name   string
		stream []byte
		opt    StreamOptions
		want   string
	}{
		{"dot-dot", stream(t, 1, file("../x", "y")), StreamOptions{}, "leaves the bundle directory"},
		{"dot-dot that stays inside", stream(t, 1, file("a/../x", "y")), StreamOptions{}, `".." component`},
		{"dot-dot inside", stream(t, 1, file("a/../../x", "y")), StreamOptions{}, "leaves the bundle directory"},
		{"absolute", stream(t, 1, file(filepath.Join(outside, "x"), "y")), StreamOptions{}, "absolute path"},
		{"symlink", stream(t, 0, symlink("l", ".")), StreamOptions{}, "links are not allowed"},
		{"symlink out", stream(t, 1, symlink("l", outside), file("l/x", "y")), StreamOptions{}, "links are not allowed"},
		{"hard link", stream(t, 1, file("a", "y"), hardlink("b", "a")), StreamOptions{}, "links are not allowed"},
		{"fifo", stream(t, 0, entry{typ: tar.TypeFifo, name: "f"}), StreamOptions{}, "fifo entries are not allowed"},
		{"file over MaxFileBytes", stream(t, 11, zeros("big", 11)), StreamOptions{MaxFileBytes: 10}, "exceeds the limit of 10 bytes for a file"},
		{"past the announced total", stream(t, 4, file("a", "abc"), file("b", "def")), StreamOptions{}, "expands past the limit of 4 bytes"},
		{"past the limit", stream(t, -1, file("a", "abc"), file("b", "def")), StreamOptions{Limit: 5}, "expands past the limit of 5 bytes"},
		{"twice", stream(t, 2, file("a", "x"), file("a", "y")), StreamOptions{}, "duplicate entry"},
		{"global header later", append(stream(t, -1, file("a", "x"))[:1024], stream(t, 1, file("b", "y"))...), StreamOptions{}, "global header after the first entry"},
		{"sent apart, no Direct", stream(t, 5, entry{typ: 'D', name: "d", size: 5}), StreamOptions{}, "cannot fetch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "artifacts")
			err := UnpackStream(bytes.NewReader(c.stream), dir, c.opt)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("UnpackStream: %v, want an error with %q", err, c.want)
			}
			if got := files(t, outside); len(got) != 0 {
				t.Errorf("written outside: %v", got)
			}
			for name := range files(t, dir) {
				if strings.Contains(name, ".tmp-") {
					t.Errorf("a temporary file is left: %s", name)
				}
			}
			if fi, err := os.Lstat(filepath.Join(dir, "l")); err == nil {
				t.Errorf("the link was made: %v", fi.Mode())
			}
		})
	}
}

// The stream is cut inside the second file: the first, whole, stays; the
// second is neither there under its name nor left under a temporary one.
func TestUnpackStreamTruncated(t *testing.T) {
	s := stream(t, 3+100000, file("a", "abc"), zeros("b", 100000))
	dir := t.TempDir()
	err := UnpackStream(bytes.NewReader(s[:len(s)-1024-50000]), dir, StreamOptions{})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("UnpackStream of a cut stream: %v, want io.ErrUnexpectedEOF", err)
	}
	if got := files(t, dir); len(got) != 1 || got["a"] != "abc" {
		t.Errorf("left: %v, want only a", got)
	}
}

func TestWriteTreeRoundTrip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "sub dir", "deep"), 0o755)
	os.WriteFile(filepath.Join(src, "model.bin"), bytes.Repeat([]byte("m"), 3000), 0o600)
	os.WriteFile(filepath.Join(src, "sub dir", "it's.txt"), []byte("hi"), 0o644)
	os.WriteFile(filepath.Join(src, "sub dir", "deep", "direct.bin"), bytes.Repeat([]byte("d"), 2000), 0o644)
	os.WriteFile(filepath.Join(src, "huge.bin"), make([]byte, 5000), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(src, "link"))
	os.Symlink("sub dir", filepath.Join(src, "dirlink"))

	var s bytes.Buffer
	if err := WriteTree(&s, src, 4000, 2500); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "artifacts")
	os.MkdirAll(dst, 0o755)
	os.WriteFile(filepath.Join(dst, "model.bin"), []byte("an older copy"), 0o644)
	var (
		total    int64 = -1
		progress []int64
		direct   []string
	)
	err := UnpackStream(&s, dst, StreamOptions{
		MaxFileBytes: 4000,
		Total:        func(n int64) { total = n },
		Progress:     func(n int64) { progress = append(progress, n) },
		Direct: func(name string, size int64, f *os.File) error {
			direct = append(direct, name)
			return SendFile(f, src, name, size)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"model.bin":               strings.Repeat("m", 3000),
		"sub dir/it's.txt":        "hi",
		"sub dir/deep/direct.bin": strings.Repeat("d", 2000),
	}
	got := files(t, dst)
	if len(got) != len(want) {
		t.Errorf("files %d, want %d: %v", len(got), len(want), keys(got))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d bytes, want %d", k, len(got[k]), len(v))
		}
	}
	if total != 5002 {
		t.Errorf("total %d, want 5002", total)
	}
	if len(progress) == 0 || progress[len(progress)-1] != 5002 {
		t.Errorf("progress %v, want it to end at 5002", progress)
	}
	// Only model.bin (3000 bytes) is over directMin, 2500.
	if len(direct) != 1 || direct[0] != "model.bin" {
		t.Errorf("sent apart: %v, want [model.bin]", direct)
	}
	for _, l := range []string{"link", "dirlink"} {
		if _, err := os.Lstat(filepath.Join(dst, l)); err == nil {
			t.Errorf("%s was copied", l)
		}
	}
}

// A file sent apart whose content falls short is not renamed into place.
func TestUnpackStreamDirectShort(t *testing.T) {
	dir := t.TempDir()
	err := UnpackStream(bytes.NewReader(stream(t, 10, entry{typ: 'D', name: "d", size: 10})), dir, StreamOptions{
		Direct: func(name string, size int64, f *os.File) error {
			_, err := f.WriteString("short")
			return err
		},
	})
	if err == nil || !strings.Contains(err.Error(), "5 bytes arrived of 10") {
		t.Fatalf("UnpackStream: %v", err)
	}
	if got := files(t, dir); len(got) != 0 {
		t.Errorf("left: %v", keys(got))
	}
}

func TestSendFileRefuses(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "a"), []byte("abc"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(src, "l"))
	for _, c := range []struct {
		name string
		size int64
	}{{"a", 4}, {"../a", 3}, {"l", 3}, {"missing", 3}} {
		if err := SendFile(io.Discard, src, c.name, c.size); err == nil {
			t.Errorf("SendFile(%q, %d) succeeded", c.name, c.size)
		}
	}
}

func keys(m map[string]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}
