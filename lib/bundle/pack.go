package bundle

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"potato-training/lib/atomicfile"
)

// packTime is the modification time of every packed entry, so that two
// packs of the same directory are byte-identical.
var packTime = time.Unix(0, 0)

// Pack writes dir as a tar.gz to w and returns the archive's sha256 (hex)
// and size. The archive is deterministic: entries in lexical order, names
// relative to dir, mode 0755 for directories and 0644 for files, owner 0,
// modification time 0, and no name or time in the gzip header. A symlink
// whose target is inside dir is stored as a relative symlink; one whose
// target is outside is stored as the regular file it leads to (media may be
// linked that way). Anything else (sockets, devices, a symlink to a
// directory outside dir, a dangling symlink) is an error.
func Pack(dir string, w io.Writer) (sha256hex string, n int64, err error) {
	root, err := filepath.EvalSymlinks(dir)
	if err == nil {
		root, err = filepath.Abs(root)
	}
	if err != nil {
		return "", 0, fmt.Errorf("bundle: pack: %w", err)
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	zw := gzip.NewWriter(cw)
	tw := tar.NewWriter(zw)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		return packEntry(tw, root, p, filepath.ToSlash(rel), d)
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return "", 0, fmt.Errorf("bundle: pack %q: %w", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil)), cw.n, nil
}

func packEntry(tw *tar.Writer, root, p, name string, d fs.DirEntry) error {
	hdr := &tar.Header{Name: name, ModTime: packTime}
	switch t := d.Type(); {
	case t.IsDir():
		hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, name+"/", 0o755
		return tw.WriteHeader(hdr)
	case t.IsRegular():
		return packFile(tw, hdr, p)
	case t&fs.ModeSymlink != 0:
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			return fmt.Errorf("symlink %q: %w", name, err)
		}
		if inside, _ := filepath.Rel(root, target); filepath.IsLocal(inside) {
			link, err := filepath.Rel(filepath.Join(root, filepath.Dir(filepath.FromSlash(name))), target)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, filepath.ToSlash(link), 0o777
			return tw.WriteHeader(hdr)
		}
		return packFile(tw, hdr, target)
	default:
		return fmt.Errorf("%q is not a regular file, directory or symlink", name)
	}
}

// packFile stores the regular file at p (following symlinks) as hdr.Name.
func packFile(tw *tar.Writer, hdr *tar.Header, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%q leads outside the bundle to something that is not a regular file", hdr.Name)
	}
	hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, info.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, f)
	if err == nil && n != hdr.Size {
		err = fmt.Errorf("%q changed while it was packed", hdr.Name)
	}
	return err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// PackFile packs dir into the file dst, written as .dst.tmp beside it,
// synced and renamed, so dst is either absent, the old archive, or whole.
// dst must not be inside dir.
func PackFile(dir, dst string) (sha string, n int64, err error) {
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", 0, fmt.Errorf("bundle: %w", err)
	}
	absDst, err := filepath.Abs(dst)
	if err != nil {
		return "", 0, fmt.Errorf("bundle: %w", err)
	}
	if rel, err := filepath.Rel(absDir, absDst); err == nil && filepath.IsLocal(rel) {
		return "", 0, fmt.Errorf("bundle: pack %q: the archive %q would be inside the bundle", dir, dst)
	}
	f, err := atomicfile.Create(absDst, 0o644)
	if err != nil {
		return "", 0, fmt.Errorf("bundle: %w", err)
	}
	defer f.Abort()
	sum, n, err := Pack(dir, f)
	if err != nil {
		return "", 0, err
	}
	if err := f.Commit(); err != nil {
		return "", 0, fmt.Errorf("bundle: %w", err)
	}
	return sum, n, nil
}
