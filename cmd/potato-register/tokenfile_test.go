package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The token file is never readable by others, at any moment, whatever
// the umask: the new file is mode 0600 from its creation, before the
// token is in it, and it replaces a wider file of the same name whole.
func TestTokenFileModeFromTheStart(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "lab.token")
	if err := os.WriteFile(path, []byte("old token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tf, err := newTokenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer tf.abandon()
	fi, err := os.Stat(tf.f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || filepath.Dir(tf.f.Name()) != dir {
		t.Errorf("the new file %s has mode %#o before the token is written, want 0600 beside the path", tf.f.Name(), fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); string(b) != "old token\n" {
		t.Errorf("the path holds %q before commit, want the old token whole", b)
	}
	if err := tf.commit("0123abcd"); err != nil {
		t.Fatal(err)
	}
	fi, err = os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "0123abcd\n" || fi.Mode().Perm() != 0o600 {
		t.Errorf("after commit: %q, mode %#o; want the token and 0600", b, fi.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files beside the token file: %v", entries)
	}
}

// A file abandoned before commit leaves nothing behind, and the path as
// it was.
func TestTokenFileAbandoned(t *testing.T) {
	dir := t.TempDir()
	tf, err := newTokenFile(filepath.Join(dir, "lab.token"))
	if err != nil {
		t.Fatal(err)
	}
	tf.abandon()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("an abandoned token file left %v", entries)
	}
}
