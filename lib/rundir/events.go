package rundir

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"potato-training/lib/atomicfile"
)

// EventsArchive is a finished run's events.jsonl compressed with gzip
// (potato-rundir(5)): zcat, zless and zgrep read it.
const EventsArchive = EventsFile + ".gz"

// CompressEvents replaces the events.jsonl of a finished run with
// events.jsonl.gz. It reports whether it compressed anything: a run
// without events.jsonl (compressed before, or that never ran) is left as
// it is. It refuses a run that is not over, whose dispatch may still
// append to the file, and one whose predictions wait for potato-dispatch
// writeback, which reads its metrics from there. The archive is written
// beside, synced and renamed into place before events.jsonl is removed: a
// crash leaves one complete copy or both.
func (r *Root) CompressEvents(id string) (bool, error) {
	info, err := r.Read(id)
	if err != nil {
		return false, err
	}
	if !info.Finished {
		return false, fmt.Errorf("run %s is not finished: its events.jsonl is still written", id)
	}
	if info.WritebackPending {
		return false, fmt.Errorf("run %s waits for potato-dispatch writeback: its events.jsonl stays", id)
	}
	dir := r.RunDir(id)
	src := filepath.Join(dir, EventsFile)
	in, err := os.Open(src)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return false, err
	}
	dst := filepath.Join(dir, EventsArchive)
	out, err := atomicfile.Create(dst, st.Mode().Perm())
	if err != nil {
		return false, err
	}
	defer out.Abort()
	zw, _ := gzip.NewWriterLevel(out, gzip.BestCompression)
	zw.Name = EventsFile
	zw.ModTime = st.ModTime()
	if _, err := io.Copy(zw, in); err != nil {
		return false, fmt.Errorf("compressing %s: %w", src, err)
	}
	if err := zw.Close(); err != nil {
		return false, fmt.Errorf("compressing %s: %w", src, err)
	}
	if err := out.Commit(); err != nil {
		return false, fmt.Errorf("compressing %s: %w", src, err)
	}
	_ = os.Chtimes(dst, st.ModTime(), st.ModTime())
	if err := os.Remove(src); err != nil {
		return false, err
	}
	return true, nil
}

// OpenEvents opens the events of the run in dir: events.jsonl, an
// *os.File, or events.jsonl.gz uncompressed when that is what the run
// keeps; either one's Stat describes the file on disk. A run with neither
// gives an error wrapping fs.ErrNotExist.
func OpenEvents(dir string) (io.ReadCloser, error) {
	f, err := os.Open(filepath.Join(dir, EventsFile))
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return f, err
	}
	gz, gerr := os.Open(filepath.Join(dir, EventsArchive))
	if gerr != nil {
		return nil, err // events.jsonl's: the file the caller asked for
	}
	zr, zerr := gzip.NewReader(bufio.NewReader(gz))
	if zerr != nil {
		gz.Close()
		return nil, fmt.Errorf("%s: %w", gz.Name(), zerr)
	}
	return &gzFile{zr, gz}, nil
}

type gzFile struct {
	*gzip.Reader
	f *os.File
}

// Stat describes the archive on disk.
func (g *gzFile) Stat() (fs.FileInfo, error) { return g.f.Stat() }

func (g *gzFile) Close() error {
	g.Reader.Close()
	return g.f.Close()
}
