package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The ways to place a media file, in the order they are tried. Variables so
// a test can make one fail.
var (
	linkFile    = os.Link
	symlinkFile = os.Symlink
)

// placeMedia puts the media file src under media/<xx>/, xx being the first
// two hex digits of sha256(src), and returns its path in the bundle, or ""
// when src is not there (the row is then media_missing). An error means the
// bundle itself could not be written.
func (w *Writer) placeMedia(src string) (string, error) {
	info, err := os.Stat(src)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		w.warn("media %q: %v", src, err)
		return "", nil
	case !info.Mode().IsRegular():
		w.warn("media %q: not a regular file", src)
		return "", nil
	}
	// Link the file itself, not a symlink that leads to it: a hard link to a
	// relative symlink would dangle once inside the bundle.
	real, err := filepath.EvalSymlinks(src)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		w.warn("media %q: %v", src, err)
		return "", nil
	}

	sum := sha256.Sum256([]byte(src))
	bucket := hex.EncodeToString(sum[:1])
	if !w.buckets[sum[0]] {
		if err := os.MkdirAll(filepath.Join(w.dir, MediaDir, bucket), 0o755); err != nil {
			return "", fmt.Errorf("bundle: %w", err)
		}
		w.buckets[sum[0]] = true
	}
	// Two sources can share a basename and a bucket; the second then gets
	// its own name, prefixed by more of its path's hash.
	base := filepath.Base(src)
	for _, name := range []string{base, hex.EncodeToString(sum[:8]) + "-" + base} {
		rel := MediaDir + "/" + bucket + "/" + name
		dst := filepath.Join(w.dir, MediaDir, bucket, name)
		err := place(real, dst)
		if err == nil || errors.Is(err, fs.ErrExist) && sameFile(dst, real, info) {
			return rel, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("bundle: media %q: %w", src, err)
		}
	}
	return "", fmt.Errorf("bundle: media %q: its names in %s/%s are taken by other files", src, MediaDir, bucket)
}

// place makes dst a hard link to src, or failing that a symlink, or failing
// that a copy. It returns an error wrapping fs.ErrExist when dst exists.
func place(src, dst string) error {
	if err := linkFile(src, dst); err == nil || errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := symlinkFile(src, dst); err == nil || errors.Is(err, fs.ErrExist) {
		return err
	}
	return copyFile(src, dst)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

// sameFile reports whether dst already holds src: the same file through a
// link, or a copy with the same bytes.
func sameFile(dst, src string, info fs.FileInfo) bool {
	di, err := os.Stat(dst)
	if err != nil || !di.Mode().IsRegular() {
		return false
	}
	if os.SameFile(di, info) {
		return true
	}
	if di.Size() != info.Size() {
		return false
	}
	return SameContent(dst, src)
}

// SameContent reports whether the files a and b can both be read and hold
// the same bytes.
func SameContent(a, b string) bool {
	fa, err := os.Open(a)
	if err != nil {
		return false
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false
	}
	defer fb.Close()
	ba, bb := make([]byte, 32<<10), make([]byte, 32<<10)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil || eb != nil {
			return (ea == io.EOF || ea == io.ErrUnexpectedEOF) && (eb == io.EOF || eb == io.ErrUnexpectedEOF)
		}
	}
}
