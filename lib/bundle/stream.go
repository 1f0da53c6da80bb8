package bundle

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
)

// A tree stream is an uncompressed tar of a directory's regular files, as
// WriteTree writes it and UnpackStream reads it: first a PAX global header
// whose record TotalRecord holds the sum of the sizes of the files that
// follow, then one entry per file, parents implied. A file may be sent
// apart (SendFile, on a channel of its own): its entry then has no content
// and the record DirectRecord holds its size. The stream carries no links,
// devices, owners or modes: the files belong to whoever unpacks them.
const (
	TotalRecord  = "POTATO.total"
	DirectRecord = "POTATO.direct"
)

// streamBuffer is the size of one read or write of file content; large,
// so a copy through a pipe takes few system calls.
const streamBuffer = 1 << 20

// errChanged is a file that changed between the listing and its copy.
var errChanged = errors.New("the file changed while it was being sent")

// WriteTree writes the tree stream of dir's regular files to w, leaving out
// those over maxBytes (0: none are left out); a file over directMin bytes
// (0: none) is announced to be sent apart. Symlinks, devices and other
// special files are neither followed nor sent. A file whose size changes
// between the listing and its copy fails the stream, so no entry is ever
// padded or cut to fit its header.
func WriteTree(w io.Writer, dir string, maxBytes, directMin int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("bundle: send tree: %w", err)
	}
	defer root.Close()
	type item struct {
		name string
		size int64
	}
	var (
		items []item
		total int64
	)
	err = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if maxBytes > 0 && info.Size() > maxBytes {
			return nil
		}
		items = append(items, item{p, info.Size()})
		total += info.Size()
		return nil
	})
	if err != nil {
		return fmt.Errorf("bundle: send tree: %w", err)
	}
	sort.Slice(items, func(i, j int) bool { return items[i].name < items[j].name })
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "tree",
		PAXRecords: map[string]string{TotalRecord: strconv.FormatInt(total, 10)}}); err != nil {
		return fmt.Errorf("bundle: send tree: %w", err)
	}
	buf := make([]byte, streamBuffer)
	for _, it := range items {
		var err error
		if directMin > 0 && it.size > directMin {
			err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: it.name, Mode: 0o644,
				PAXRecords: map[string]string{DirectRecord: strconv.FormatInt(it.size, 10)}})
		} else {
			err = sendEntry(tw, root, it.name, it.size, buf)
		}
		if err != nil {
			return fmt.Errorf("bundle: send tree: %s: %w", it.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("bundle: send tree: %w", err)
	}
	return nil
}

// openSized opens a regular file of dir that must have size bytes.
func openSized(root *os.Root, name string, size int64) (*os.File, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() != size {
		f.Close()
		return nil, errChanged
	}
	return f, nil
}

func sendEntry(tw *tar.Writer, root *os.Root, name string, size int64, buf []byte) error {
	f, err := openSized(root, name, size)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644}); err != nil {
		return err
	}
	// onlyWriter hides tar.Writer's methods, so the copy goes through buf.
	n, err := io.CopyBuffer(onlyWriter{tw}, io.LimitReader(f, size), buf)
	if err == nil && n < size {
		err = errChanged
	}
	return err
}

// SendFile writes the content of the file name under dir, which WriteTree
// announced to be sent apart, to w. The file must still be a regular file
// of size bytes; name may not leave dir.
func SendFile(w io.Writer, dir, name string, size int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("bundle: send file: %w", err)
	}
	defer root.Close()
	f, err := openSized(root, name, size)
	if err != nil {
		return fmt.Errorf("bundle: send file %s: %w", name, err)
	}
	defer f.Close()
	n, err := io.CopyBuffer(onlyWriter{w}, io.LimitReader(f, size), make([]byte, streamBuffer))
	if err == nil && n < size {
		err = errChanged
	}
	if err != nil {
		return fmt.Errorf("bundle: send file %s: %w", name, err)
	}
	return nil
}

type onlyWriter struct{ io.Writer }

// StreamOptions tunes UnpackStream.
type StreamOptions struct {
	// MaxFileBytes refuses a file larger than this; 0 allows any size.
	MaxFileBytes int64
	// Limit refuses content past this many bytes in all, whatever the
	// stream's own total (TotalRecord) says; content past that total is
	// refused too. 0 means the stream's total, or no limit when it has
	// none.
	Limit int64
	// Total, when set, is called with the stream's announced total, before
	// any file.
	Total func(total int64)
	// Progress, when set, is called as content is written, with the bytes
	// written so far.
	Progress func(written int64)
	// Direct fills f, a new empty file, with the content of a file sent
	// apart, of size bytes, and reports its progress itself; the file is
	// renamed into place if it then has size bytes. Without Direct such
	// an entry is an error.
	Direct func(name string, size int64, f *os.File) error
}

// UnpackStream extracts a tree stream (WriteTree's, uncompressed) read
// from r into dir, made when missing; files already in dir stay, and an
// entry of the stream replaces a file of the same name.
//
// It applies Unpack's checks of names (no absolute names, no ".."
// components, nothing outside dir, no name twice) and refuses links of
// either kind, devices, fifos, a global header that is not the first entry
// and a file over MaxFileBytes, each with an *UnsafeEntryError, and content
// past the limit. Each file is written as ".NAME.tmp-RANDOM" in its
// directory and renamed to NAME once all its bytes are in, so a copy that
// is interrupted, even by a crash, never leaves a cut file that looks
// whole. On an error the file being written is removed; those complete
// stay.
//
// A stream that ends inside an entry is an error; one cut exactly between
// entries looks complete, so a caller must also know that its writer
// finished (for a remote writer, its exit status).
func UnpackStream(r io.Reader, dir string, opt StreamOptions) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bundle: unpack stream: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("bundle: unpack stream: %w", err)
	}
	defer root.Close()
	x := &extractor{root: root, limit: opt.Limit, seen: map[string]entryKind{},
		stream: true, maxFile: opt.MaxFileBytes, progress: opt.Progress, direct: opt.Direct, buf: make([]byte, streamBuffer)}
	if x.limit <= 0 {
		x.limit = 1<<63 - 1
	}
	tr := tar.NewReader(r)
	for n := 1; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("bundle: unpack stream: %w", err)
		}
		if n > maxEntries {
			return unsafe(hdr.Name, "the archive has more than %d entries", maxEntries)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			if n != 1 {
				return unsafe(hdr.Name, "a global header after the first entry")
			}
			if v, ok := hdr.PAXRecords[TotalRecord]; ok {
				total, err := strconv.ParseInt(v, 10, 64)
				if err != nil || total < 0 {
					return unsafe(hdr.Name, "bad total %q", v)
				}
				// The writer's own total can only lower the reader's limit.
				if total < x.limit {
					x.limit = total
				}
				if opt.Total != nil {
					opt.Total(total)
				}
			}
			continue
		}
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
}

// streamFile writes one file of a stream under a temporary name and
// renames it into place once whole.
func (x *extractor) streamFile(hdr *tar.Header, name string, r io.Reader) (err error) {
	raw := hdr.Name
	direct := false
	if v, ok := hdr.PAXRecords[DirectRecord]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n < 0:
			return unsafe(raw, "bad size %q of a file sent apart", v)
		case hdr.Size != 0:
			return unsafe(raw, "a file sent apart has content in the stream")
		case x.direct == nil:
			return unsafe(raw, "a file sent apart, which this reader cannot fetch")
		}
		hdr.Size, direct = n, true
	}
	if x.maxFile > 0 && hdr.Size > x.maxFile {
		return unsafe(raw, "size %d bytes exceeds the limit of %d bytes for a file", hdr.Size, x.maxFile)
	}
	if hdr.Size > x.limit-x.total {
		return unsafe(raw, "the stream expands past the limit of %d bytes", x.limit)
	}
	dir, base := path.Split(name)
	tmp := dir + "." + base + ".tmp-" + randomSuffix()
	f, err := x.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("bundle entry %q: %w", raw, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			x.root.Remove(tmp)
		}
	}()
	x.seen[name] = kindFile
	if direct {
		if err := x.direct(raw, hdr.Size, f); err != nil {
			return err
		}
		st, err := f.Stat()
		if err != nil {
			return fmt.Errorf("bundle entry %q: %w", raw, err)
		}
		if st.Size() != hdr.Size {
			return fmt.Errorf("bundle entry %q: %d bytes arrived of %d", raw, st.Size(), hdr.Size)
		}
		x.total += hdr.Size
		if x.progress != nil {
			x.progress(x.total)
		}
		return x.finish(f, tmp, name, raw)
	}
	w := &progressWriter{f: f, x: x}
	n, err := io.CopyBuffer(w, io.LimitReader(r, hdr.Size), x.buf)
	if err != nil {
		return fmt.Errorf("bundle entry %q: %w", raw, err)
	}
	if n < hdr.Size {
		return fmt.Errorf("bundle entry %q: %w", raw, io.ErrUnexpectedEOF)
	}
	return x.finish(f, tmp, name, raw)
}

// finish closes a whole file and gives it its name.
func (x *extractor) finish(f *os.File, tmp, name, raw string) error {
	if err := f.Close(); err != nil {
		return fmt.Errorf("bundle entry %q: %w", raw, err)
	}
	if err := x.root.Rename(tmp, name); err != nil {
		return fmt.Errorf("bundle entry %q: %w", raw, err)
	}
	return nil
}

// progressWriter writes a stream's file and counts its bytes.
type progressWriter struct {
	f *os.File
	x *extractor
}

func (w *progressWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.x.total += int64(n)
	if w.x.progress != nil && n > 0 {
		w.x.progress(w.x.total)
	}
	return n, err
}

func randomSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}
