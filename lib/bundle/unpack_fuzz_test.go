package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// hostile is one member of a seed archive; size, when set, is what the
// header claims whatever the body holds.
type hostile struct {
	typ        byte
	name, link string
	body       string
	size       int64
	pax        map[string]string
	format     tar.Format
}

// rawTar writes the members as an uncompressed tar stream, headers as
// given: a header that claims more than its body ends the stream there.
func rawTar(f *testing.F, members ...hostile) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		h := &tar.Header{Typeflag: m.typ, Name: m.name, Linkname: m.link, Mode: 0o644, PAXRecords: m.pax, Format: m.format}
		if m.typ == tar.TypeXGlobalHeader {
			h = &tar.Header{Typeflag: m.typ, PAXRecords: m.pax}
		}
		if m.typ == tar.TypeReg {
			h.Size = int64(len(m.body))
			if m.size != 0 {
				h.Size = m.size
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			f.Fatalf("%s: %v", m.name, err)
		}
		if h.Size != int64(len(m.body)) {
			return buf.Bytes() // the rest of the archive is missing
		}
		if _, err := tw.Write([]byte(m.body)); err != nil {
			f.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// hostileSeeds are archives that try to write outside the directory, go
// through links, or claim more than they hold.
func hostileSeeds(f *testing.F) [][]byte {
	reg := func(name, body string) hostile { return hostile{typ: tar.TypeReg, name: name, body: body} }
	sym := func(name, link string) hostile { return hostile{typ: tar.TypeSymlink, name: name, link: link} }
	hard := func(name, link string) hostile { return hostile{typ: tar.TypeLink, name: name, link: link} }
	dir := func(name string) hostile { return hostile{typ: tar.TypeDir, name: name} }
	long := strings.Repeat("d/", 200) + "f"
	return [][]byte{
		rawTar(f, dir("media"), reg("manifest.json", `{"v":1}`), reg("media/ab/x.png", "png"), reg("train.jsonl", "{}\n")),
		rawTar(f, reg("../outside/evil", "x")),
		rawTar(f, reg("/tmp/evil", "x")),
		rawTar(f, reg("a/../../outside/evil", "x")),
		rawTar(f, reg("./ok", "x"), reg("ok", "again")),
		rawTar(f, sym("l", ".."), reg("l/outside/evil", "x")),
		rawTar(f, sym("l", "../outside"), reg("l/evil", "x")),
		rawTar(f, sym("abs", "/etc"), reg("abs/evil", "x")),
		rawTar(f, sym("a", "."), sym("b", "a/.."), reg("b/outside/evil", "x")),
		rawTar(f, sym("a", "."), sym("b", "a/..")),
		rawTar(f, sym("dangling", "nowhere")),
		rawTar(f, hard("h", "../outside/keep")),
		rawTar(f, reg("f", "x"), hard("h", "f"), reg("h2", "y")),
		rawTar(f, sym("s", "f"), reg("f", "x"), hard("h", "s")),
		rawTar(f, hostile{typ: tar.TypeChar, name: "dev"}),
		rawTar(f, hostile{typ: tar.TypeFifo, name: "fifo"}),
		rawTar(f, hostile{typ: tar.TypeReg, name: "big", size: 1 << 40}),
		rawTar(f, hostile{typ: tar.TypeReg, name: "big", size: 2 << 20}),
		rawTar(f, reg(long, "x")),
		rawTar(f, hostile{typ: tar.TypeReg, name: "p", body: "x", pax: map[string]string{"path": "../outside/evil"}}),
		rawTar(f, hostile{typ: tar.TypeReg, name: "p", body: "x", pax: map[string]string{"comment": strings.Repeat("c", 64<<10)}}),
		rawTar(f, hostile{typ: tar.TypeReg, name: strings.Repeat("n", 300), body: "x", format: tar.FormatGNU}),
		rawTar(f, hostile{typ: tar.TypeXGlobalHeader, pax: map[string]string{TotalRecord: "3"}}, reg("f", "abc")),
		rawTar(f, reg("f", "abc"), hostile{typ: tar.TypeXGlobalHeader, pax: map[string]string{TotalRecord: "-1"}}),
		rawTar(f, reg("f", "x"), reg("f/g", "y")),
	}
}

// FuzzUnpack extracts arbitrary tar streams, gzipped for Unpack or as
// they are for UnpackStream (copy-back). Whatever the stream, nothing is
// written outside the directory (a file beside it keeps its content and
// its one link), no device or fifo is made, no symlink left leads
// outside, file content stays within the limit, and a failed Unpack
// leaves the directory empty.
func FuzzUnpack(f *testing.F) {
	for _, s := range hostileSeeds(f) {
		f.Add(false, s)
		f.Add(true, s)
	}
	const limit = 1 << 20
	f.Fuzz(func(t *testing.T, stream bool, tarBytes []byte) {
		parent := t.TempDir()
		out, outside := filepath.Join(parent, "out"), filepath.Join(parent, "outside")
		keep := filepath.Join(outside, "keep")
		if err := os.Mkdir(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keep, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		if stream {
			err = UnpackStream(bytes.NewReader(tarBytes), out, StreamOptions{Limit: limit, MaxFileBytes: limit})
		} else {
			var gz bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
			zw.Write(tarBytes)
			zw.Close()
			err = Unpack(&gz, out, limit)
		}
		if err != nil && err.Error() == "" {
			t.Fatalf("an error with no message")
		}
		// Beside the directory: nothing new, the file as it was.
		names, _ := os.ReadDir(parent)
		for _, e := range names {
			if e.Name() != "out" && e.Name() != "outside" {
				t.Fatalf("%q written beside the directory (err %v)", e.Name(), err)
			}
		}
		if names, _ := os.ReadDir(outside); len(names) != 1 {
			t.Fatalf("%d entries in the directory beside, want keep alone (err %v)", len(names), err)
		}
		st, serr := os.Lstat(keep)
		b, _ := os.ReadFile(keep)
		if serr != nil || !st.Mode().IsRegular() || string(b) != "keep" || st.Sys().(*syscall.Stat_t).Nlink != 1 {
			t.Fatalf("the file beside changed: %v %v %q (err %v)", st, serr, b, err)
		}
		// Inside: what is there is harmless.
		realOut, _ := filepath.EvalSymlinks(out)
		var total int64
		var entries int
		walkErr := filepath.WalkDir(out, func(p string, d fs.DirEntry, werr error) error {
			if werr != nil {
				if errors.Is(werr, fs.ErrNotExist) && p == out {
					return nil // Unpack's cleanup removed what it made
				}
				return werr
			}
			if p == out {
				return nil
			}
			entries++
			info, ierr := d.Info()
			if ierr != nil {
				return ierr
			}
			switch m := info.Mode(); {
			case m.IsRegular():
				total += info.Size()
			case m&fs.ModeSymlink != 0:
				if stream {
					t.Fatalf("a copied tree made the symlink %s", p)
				}
				if r, rerr := filepath.EvalSymlinks(p); rerr == nil && r != realOut && !strings.HasPrefix(r, realOut+string(filepath.Separator)) {
					t.Fatalf("symlink %s leads to %s, outside (err %v)", p, r, err)
				}
			case m.IsDir():
			default:
				t.Fatalf("%s is a %v (err %v)", p, m, err)
			}
			return nil
		})
		if walkErr != nil {
			t.Fatal(walkErr)
		}
		if total > limit {
			t.Fatalf("%d bytes extracted, limit %d (err %v)", total, limit, err)
		}
		if err != nil && !stream && entries > 0 {
			t.Fatalf("Unpack failed (%v) and left %d entries", err, entries)
		}
	})
}

// FuzzVerify reads arbitrary bytes as a bundle's manifest.json, beside a
// split file and a file outside the bundle: Verify must not panic, must
// refuse a split path that leaves the bundle, and accepts only a manifest
// of version 1 whose digest and row counts are those of the files.
func FuzzVerify(f *testing.F) {
	sum := func(files ...string) string {
		dir := f.TempDir()
		for _, p := range files {
			os.WriteFile(filepath.Join(dir, p), []byte("{\"id\": 1}\n"), 0o644)
		}
		s, _, _ := digest(dir, files)
		return s
	}
	for _, s := range []string{
		`{"v":1,"splits":{"train":{"path":"train.jsonl","format":"jsonl","n":1}},"digest":"` + sum("train.jsonl") + `"}`,
		`{"v":1,"splits":{"train":{"path":"train.jsonl","n":2}},"digest":"` + sum("train.jsonl") + `"}`,
		`{"v":1,"splits":{"x":{"path":"../outside.jsonl","n":1}},"digest":""}`,
		`{"v":1,"splits":{"x":{"path":"/etc/passwd","n":1}}}`,
		`{"v":1,"splits":{"x":{"path":"","n":0}}}`, `{"v":1,"splits":{"x":{"path":".","n":0}}}`,
		`{"v":1,"splits":{"x":{"path":"train.jsonl/..","n":0}}}`,
		`{"v":2}`, `{"v":1}`, `{"v":"1"}`, `[]`, `null`, `{"v":1,"splits":null,"stats":{"warnings":[1]}}`,
		`{"v":1,"schemas":[{"name":"s","kind":"nominal","labels":["a"]}],"labels":{"s":["a"]}}`,
		`{"v":1,"splits":{"train":{"path":"train.jsonl","n":1},"again":{"path":"./train.jsonl","n":1}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, manifest []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "bundle")
		os.Mkdir(dir, 0o755)
		os.WriteFile(filepath.Join(parent, "outside.jsonl"), []byte("{\"id\": 1}\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "train.jsonl"), []byte("{\"id\": 1}\n"), 0o644)
		os.WriteFile(filepath.Join(dir, ManifestName), manifest, 0o644)
		m, rerr := ReadManifest(dir)
		err := Verify(dir)
		if (rerr != nil) && err == nil {
			t.Fatalf("ReadManifest failed (%v) and Verify passed", rerr)
		}
		if rerr == nil && m.V != 1 {
			t.Fatalf("ReadManifest accepted version %d", m.V)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "bundle") {
				t.Fatalf("error %q does not say it is the bundle's", err)
			}
			return
		}
		for name, s := range m.Splits {
			if !filepath.IsLocal(s.Path) {
				t.Fatalf("split %q: path %q leaves the bundle and Verify passed", name, s.Path)
			}
		}
		paths := make([]string, 0, len(m.Splits))
		for _, s := range m.Splits {
			paths = append(paths, s.Path)
		}
		if got, _, derr := digest(dir, paths); derr != nil || got != m.Digest {
			t.Fatalf("Verify passed with digest %q, the files' is %q (%v)", m.Digest, got, derr)
		}
	})
}
