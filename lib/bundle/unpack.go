package bundle

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxEntries caps the entries of one archive, directories included.
var maxEntries = 1_000_000

// maxTrailer is how much data may follow the end of the tar archive (tar
// writers pad to a record size) before Unpack refuses the stream.
const maxTrailer = 1 << 20

// UnsafeEntryError is Unpack's refusal of one archive entry.
type UnsafeEntryError struct {
	Name   string // the entry's name as the archive has it
	Reason string
}

func (e *UnsafeEntryError) Error() string {
	return fmt.Sprintf("bundle entry %q: %s", e.Name, e.Reason)
}

func unsafe(name, format string, args ...any) error {
	return &UnsafeEntryError{Name: name, Reason: fmt.Sprintf(format, args...)}
}

type entryKind uint8

const (
	kindImplicitDir entryKind = iota + 1 // made for an entry's parents
	kindDir
	kindFile
	kindSymlink
)

// Unpack extracts the tar.gz read from r into dir, which must be absent or
// an empty directory, writing at most limit bytes of file content.
//
// It refuses, with an *UnsafeEntryError, an entry whose name is absolute,
// has a ".." component or leaves dir; an entry under a symlink the archive
// made (nothing is written through a symlink); a symlink whose target is
// absolute, leaves dir or, once everything is extracted, does not resolve
// inside dir; a hard link to anything but a file extracted earlier;
// devices, fifos and any other type but files, directories and links; a
// name seen twice; a file whose header claims more than limit bytes;
// content past limit bytes in all (counted as copied); and more than
// 1,000,000 entries.
//
// On any error Unpack removes what it extracted: a dir it created is
// removed, and a dir that existed (empty) is emptied again.
func Unpack(r io.Reader, dir string, limit int64) (err error) {
	created, err := prepareDir(dir)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			cleanup(dir, created)
		}
	}()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("bundle: unpack: %w", err)
	}
	defer root.Close()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("bundle: unpack: %w", err)
	}
	x := &extractor{root: root, limit: limit, seen: map[string]entryKind{}}
	tr := tar.NewReader(zr)
	for n := 1; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("bundle: unpack: %w", err)
		}
		if n > maxEntries {
			return unsafe(hdr.Name, "the archive has more than %d entries", maxEntries)
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
	if err := x.checkSymlinks(); err != nil {
		return err
	}
	// Read to the end of the gzip stream so its checksum is verified.
	if _, err := io.CopyN(io.Discard, zr, maxTrailer+1); err != io.EOF {
		if err == nil {
			return fmt.Errorf("bundle: unpack: more than %d bytes follow the end of the archive", maxTrailer)
		}
		return fmt.Errorf("bundle: unpack: %w", err)
	}
	return nil
}

type extractor struct {
	root  *os.Root
	limit int64
	total int64
	seen  map[string]entryKind // cleaned name -> what this call made there
	links []string             // symlinks, in archive order

	// For UnpackStream: files and directories only, each file written
	// under a temporary name and renamed once whole, progress reported.
	stream   bool
	maxFile  int64 // the largest file allowed
	progress func(written int64)
	direct   func(name string, size int64, f *os.File) error
	buf      []byte
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	raw := hdr.Name
	name, err := checkName(raw)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink, tar.TypeLink:
		if x.stream {
			return unsafe(raw, "links are not allowed in a copied tree")
		}
	case tar.TypeChar:
		return unsafe(raw, "character device entries are not allowed")
	case tar.TypeBlock:
		return unsafe(raw, "block device entries are not allowed")
	case tar.TypeFifo:
		return unsafe(raw, "fifo entries are not allowed")
	default:
		return unsafe(raw, "entry type %q is not allowed", hdr.Typeflag)
	}
	if name == "." {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the bundle directory itself
		}
		return unsafe(raw, "entry names the bundle directory itself")
	}
	if err := x.parents(raw, name); err != nil {
		return err
	}
	if k, ok := x.seen[name]; ok {
		if k == kindImplicitDir && hdr.Typeflag == tar.TypeDir {
			x.seen[name] = kindDir
			return nil
		}
		return unsafe(raw, "duplicate entry")
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		mkdir := x.root.Mkdir
		if x.stream { // the directory may be there from an earlier copy
			mkdir = x.root.MkdirAll
		}
		if err := mkdir(name, 0o755); err != nil {
			return fmt.Errorf("bundle entry %q: %w", raw, err)
		}
		x.seen[name] = kindDir
	case tar.TypeReg:
		return x.file(hdr, name, r)
	case tar.TypeSymlink:
		t := hdr.Linkname
		switch {
		case t == "":
			return unsafe(raw, "symlink has no target")
		case path.IsAbs(t) || filepath.IsAbs(t):
			return unsafe(raw, "symlink target %q is absolute", t)
		}
		if j := path.Join(path.Dir(name), t); !filepath.IsLocal(j) {
			return unsafe(raw, "symlink target %q leaves the bundle directory", t)
		}
		if err := x.root.Symlink(t, name); err != nil {
			return fmt.Errorf("bundle entry %q: %w", raw, err)
		}
		x.seen[name] = kindSymlink
		x.links = append(x.links, name)
	case tar.TypeLink:
		t := hdr.Linkname
		switch {
		case t == "":
			return unsafe(raw, "hard link has no target")
		case path.IsAbs(t) || filepath.IsAbs(t):
			return unsafe(raw, "hard link target %q is absolute", t)
		case !filepath.IsLocal(path.Clean(t)):
			return unsafe(raw, "hard link target %q leaves the bundle directory", t)
		case x.seen[path.Clean(t)] != kindFile:
			return unsafe(raw, "hard link target %q is not a file extracted earlier from this archive", t)
		}
		if err := x.root.Link(path.Clean(t), name); err != nil {
			return fmt.Errorf("bundle entry %q: %w", raw, err)
		}
		x.seen[name] = kindFile
	}
	return nil
}

func (x *extractor) file(hdr *tar.Header, name string, r io.Reader) error {
	raw := hdr.Name
	if hdr.Size < 0 {
		return unsafe(raw, "negative size")
	}
	if hdr.Size > x.limit {
		return unsafe(raw, "size %d bytes exceeds the limit of %d bytes", hdr.Size, x.limit)
	}
	if x.stream {
		return x.streamFile(hdr, name, r)
	}
	// O_EXCL: never open a name that is already there, a symlink included.
	f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("bundle entry %q: %w", raw, err)
	}
	x.seen[name] = kindFile
	n, err := io.Copy(f, io.LimitReader(r, x.limit-x.total+1))
	x.total += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bundle entry %q: %w", raw, err)
	}
	if x.total > x.limit {
		return unsafe(raw, "the archive expands past the limit of %d bytes", x.limit)
	}
	return nil
}

// checkName cleans an entry name, refusing one that could land outside the
// bundle directory.
func checkName(raw string) (string, error) {
	if raw == "" {
		return "", unsafe(raw, "empty name")
	}
	if path.IsAbs(raw) || filepath.IsAbs(raw) {
		return "", unsafe(raw, "absolute path")
	}
	name := path.Clean(raw)
	if name != "." && !filepath.IsLocal(name) {
		return "", unsafe(raw, "path leaves the bundle directory")
	}
	for _, c := range strings.Split(raw, "/") {
		if c == ".." {
			return "", unsafe(raw, "path has a \"..\" component")
		}
	}
	return name, nil
}

// parents checks that every parent of name is a directory this call made
// or a new one, and makes the new ones.
func (x *extractor) parents(raw, name string) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	missing := false
	for i := 0; i <= len(dir); i++ {
		if i < len(dir) && dir[i] != '/' {
			continue
		}
		p := dir[:i]
		switch x.seen[p] {
		case kindSymlink:
			return unsafe(raw, "path goes through the symlink %q", p)
		case kindFile:
			return unsafe(raw, "parent %q is not a directory", p)
		case 0:
			missing = true
		}
	}
	if !missing {
		return nil
	}
	if err := x.root.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bundle entry %q: %w", raw, err)
	}
	for i := 0; i <= len(dir); i++ {
		if i == len(dir) || dir[i] == '/' {
			if x.seen[dir[:i]] == 0 {
				x.seen[dir[:i]] = kindImplicitDir
			}
		}
	}
	return nil
}

// checkSymlinks resolves every extracted symlink, now that all of them are
// there: a chain of links that are each inside the directory can still
// lead out of it ("b -> a/.." with "a -> .").
func (x *extractor) checkSymlinks() error {
	for _, l := range x.links {
		if _, err := x.root.Stat(l); err != nil {
			t, _ := x.root.Readlink(l)
			if errors.Is(err, fs.ErrNotExist) {
				return unsafe(l, "symlink target %q does not exist in the bundle", t)
			}
			return unsafe(l, "symlink target %q does not resolve inside the bundle directory", t)
		}
	}
	return nil
}

// prepareDir makes sure dir is an empty directory and returns the topmost
// directory it had to create ("" when dir existed).
func prepareDir(dir string) (string, error) {
	info, err := os.Stat(dir)
	if err == nil {
		if !info.IsDir() {
			return "", fmt.Errorf("bundle: unpack: %q is not a directory", dir)
		}
		empty, err := isEmptyDir(dir)
		if err != nil {
			return "", fmt.Errorf("bundle: unpack: %w", err)
		}
		if !empty {
			return "", fmt.Errorf("bundle: unpack: %q is not empty", dir)
		}
		return "", nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("bundle: unpack: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("bundle: unpack: %w", err)
	}
	top := abs
	for {
		parent := filepath.Dir(top)
		if parent == top {
			break
		}
		if _, err := os.Lstat(parent); err == nil {
			break
		}
		top = parent
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("bundle: unpack: %w", err)
	}
	return top, nil
}

// cleanup undoes a failed Unpack. os.RemoveAll does not follow symlinks, so
// an extracted link cannot make it remove anything outside dir.
func cleanup(dir, created string) {
	if created != "" {
		os.RemoveAll(created)
		return
	}
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	names, _ := f.Readdirnames(-1)
	f.Close()
	for _, n := range names {
		os.RemoveAll(filepath.Join(dir, n))
	}
}

// UnpackFile unpacks the tar.gz at path into dir as Unpack does. When
// wantSHA is set, the file's sha256 (hex) must equal it; this is checked
// before anything is extracted.
func UnpackFile(path, dir string, limit int64, wantSHA string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("bundle: unpack: %w", err)
	}
	defer f.Close()
	if wantSHA != "" {
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return fmt.Errorf("bundle: unpack: %w", err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, wantSHA) {
			return fmt.Errorf("bundle: unpack %q: sha256 is %s, want %s: %w", path, got, wantSHA, ErrChecksum)
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("bundle: unpack: %w", err)
		}
	}
	return Unpack(f, dir, limit)
}
