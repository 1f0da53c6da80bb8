// Package atomicfile is the toolkit's one way to replace a file: what is
// written goes to a temporary file beside the path, which is synced and
// renamed over the path only when the whole of it was written, so that a
// reader sees the old file or the whole new one, never a part, and a
// failed write leaves nothing behind.
//
// The temporary file is made with O_CREATE|O_EXCL under a unique name
// (.NAME.*.tmp), so two writers of the same path do not mix and a file
// planted at a guessed name is never written into; its mode is set before
// the first byte, so a file made 0600 is never readable by others, even
// for a moment (WriteSecret).
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// File is a file being written in place of a path: Write to it, then
// Commit, or Abort. Abort after Commit does nothing, so that
//
//	f, err := atomicfile.Create(path, 0o644)
//	...
//	defer f.Abort()
//	... write ...
//	return f.Commit()
//
// never leaves a temporary file behind.
type File struct {
	f    *os.File
	path string
	done bool
}

// Create starts a new file for path with mode perm.
func Create(path string, perm os.FileMode) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	// Set by hand: os.CreateTemp makes 0600 less the umask, and a
	// directory's default ACL may have widened it.
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &File{f: f, path: path}, nil
}

// Write writes to the temporary file.
func (f *File) Write(p []byte) (int, error) { return f.f.Write(p) }

// File is the temporary file itself, for what needs an *os.File
// (ReadFrom, Seek); it must not be closed.
func (f *File) File() *os.File { return f.f }

// Commit syncs the temporary file, renames it over the path and syncs the
// directory. On an error nothing is left behind and the path is as it was.
func (f *File) Commit() error {
	if f.done {
		return errors.New("atomicfile: " + f.path + ": committed or aborted already")
	}
	f.done = true
	tmp := f.f.Name()
	if err := f.f.Sync(); err != nil {
		f.f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return Promote(tmp, f.path)
}

// Abort removes the temporary file, unless Commit or Abort came first.
func (f *File) Abort() {
	if f.done {
		return
	}
	f.done = true
	f.f.Close()
	os.Remove(f.f.Name())
}

// Write replaces path with what write writes, mode perm.
func Write(path string, perm os.FileMode, write func(io.Writer) error) error {
	f, err := Create(path, perm)
	if err != nil {
		return err
	}
	defer f.Abort()
	if err := write(f); err != nil {
		return err
	}
	return f.Commit()
}

// WriteFile replaces path with data, mode perm.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// CreateSecret starts a new file for path, mode 0600 from its creation,
// for tokens and keys: no one but its owner can read it at any moment,
// whatever the umask. A path that exists and is not a regular file (a
// directory, a fifo, a device) is refused rather than replaced.
func CreateSecret(path string) (*File, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return Create(path, 0o600)
}

// WriteSecret replaces path with data by CreateSecret.
func WriteSecret(path string, data []byte) error {
	f, err := CreateSecret(path)
	if err != nil {
		return err
	}
	defer f.Abort()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Commit()
}

// Promote renames tmp, a file written and synced beside path (a download
// resumed across attempts, say), over path, and syncs the directory; on an
// error tmp is removed.
func Promote(tmp, path string) error {
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

// Symlink points link at target, replacing what link was: a reader sees
// the old link or the new one, never none.
func Symlink(target, link string) error {
	tmp, err := tmpName(link)
	if err != nil {
		return err
	}
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return Promote(tmp, link)
}

// ReplaceDir renames the directory tmp, made and filled beside dir, over
// dir: an existing dir is first moved aside and removed once tmp took its
// place. A reader may find no dir for a moment, never a part of one.
func ReplaceDir(tmp, dir string) error {
	if _, err := os.Lstat(dir); err == nil {
		aside := tmp + ".old"
		if err := os.Rename(dir, aside); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		defer os.RemoveAll(aside)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	syncDir(filepath.Dir(dir))
	return nil
}

// tmpName is a name beside path that nothing has yet.
func tmpName(path string) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return "", err
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return "", err
	}
	return name, nil
}

// syncDir makes a rename in dir durable; a directory that cannot be
// opened or synced (some file systems refuse it) changes nothing.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
