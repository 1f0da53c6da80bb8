package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// tokenFile is a token file being written: a new file of a random name
// beside its path, created exclusively with mode 0600, renamed over the
// path once the token is in it. No one but its owner can read it at any
// moment, and a reader of the path sees the old token or the new one,
// whole.
type tokenFile struct {
	path string
	f    *os.File
}

func newTokenFile(path string) (*tokenFile, error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	// os.CreateTemp opens with O_CREATE|O_EXCL and mode 0600: a file of
	// that name planted beforehand is never written into.
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, err
	}
	// The mode is set again by hand, in case a umask or a directory's
	// default ACL made it wider.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &tokenFile{path: path, f: f}, nil
}

// commit writes the token, syncs it and renames the file over the path.
func (t *tokenFile) commit(token string) error {
	if _, err := t.f.WriteString(token + "\n"); err != nil {
		return err
	}
	if err := t.f.Sync(); err != nil {
		return err
	}
	if err := t.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(t.f.Name(), t.path); err != nil {
		return err
	}
	t.f = nil
	if d, err := os.Open(filepath.Dir(t.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// abandon removes the new file unless commit renamed it.
func (t *tokenFile) abandon() {
	if t.f != nil {
		t.f.Close()
		os.Remove(t.f.Name())
	}
}
