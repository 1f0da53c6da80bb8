package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// A write that fails leaves the old file whole and nothing beside it; one
// that succeeds replaces it with the new bytes and mode.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.json")
	if err := WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, 0o600, func(w io.Writer) error {
		if _, err := w.Write([]byte("half")); err != nil {
			return err
		}
		if b, _ := os.ReadFile(path); string(b) != "old\n" {
			t.Errorf("while writing, the path holds %q, want the old file", b)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write returned %v, want the writer's error", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old\n" {
		t.Errorf("after a failed write the path holds %q, want the old file", b)
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("a failed write left %v", got)
	}
	if err := WriteFile(path, []byte("new\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new\n" || fi.Mode().Perm() != 0o640 {
		t.Errorf("after the write: %q mode %#o, want \"new\\n\" 0640", b, fi.Mode().Perm())
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("a write left %v", got)
	}
}

// A secret is never readable by others, at any moment, whatever the
// umask: the new file is 0600 from its creation, before a byte is in it,
// and it replaces a wider file of the same name whole.
func TestCreateSecretModeFromTheStart(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "lab.token")
	if err := os.WriteFile(path, []byte("old token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := CreateSecret(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Abort()
	fi, err := f.File().Stat()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || filepath.Dir(f.File().Name()) != dir {
		t.Errorf("the new file %s has mode %#o before the token is written, want 0600 beside the path", f.File().Name(), fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(path); string(b) != "old token\n" {
		t.Errorf("the path holds %q before commit, want the old token whole", b)
	}
	if _, err := io.WriteString(f, "0123abcd\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}
	fi, err = os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "0123abcd\n" || fi.Mode().Perm() != 0o600 {
		t.Errorf("after commit: %q, mode %#o; want the token and 0600", b, fi.Mode().Perm())
	}
	if got := entries(t, dir); len(got) != 1 {
		t.Errorf("files beside the token file: %v", got)
	}
}

// A secret is not written over a directory or a fifo; an aborted one
// leaves nothing behind and the path as it was.
func TestSecretRefusalsAndAbort(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteSecret(sub, []byte("x")); err == nil {
		t.Error("WriteSecret over a directory succeeded")
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateSecret(fifo); err == nil {
		t.Error("CreateSecret over a fifo succeeded")
	}
	path := filepath.Join(dir, "lab.token")
	f, err := CreateSecret(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Abort()
	f.Abort()
	if got := entries(t, dir); len(got) != 2 {
		t.Errorf("an aborted secret left %v, want only sub and fifo", got)
	}
}

// Symlink replaces a link whole; ReplaceDir puts a full directory in
// place of another and leaves nothing aside.
func TestSymlinkAndReplaceDir(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "latest")
	for _, target := range []string{"runs/a", "runs/b"} {
		if err := Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(link); err != nil || got != target {
			t.Errorf("latest -> %q (%v), want %q", got, err, target)
		}
	}
	tree := filepath.Join(dir, "tree")
	for _, content := range []string{"one", "two"} {
		tmp, err := os.MkdirTemp(dir, ".tree.*.tmp")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := ReplaceDir(tmp, tree); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(tree, "f")); string(b) != content {
			t.Errorf("tree/f holds %q, want %q", b, content)
		}
	}
	if got := entries(t, dir); len(got) != 2 {
		t.Errorf("left beside: %v, want latest and tree", got)
	}
}
