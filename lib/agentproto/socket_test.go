package agentproto

import (
	"context"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenUnixMode(t *testing.T) {
	dir := t.TempDir()
	want := filepath.Join(dir, "agent.sock")
	if len(want) > MaxSocketPath {
		t.Skipf("the test directory %s is too deep for a socket", dir)
	}
	l, got, err := ListenUnix(want)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("socket at %s, want %s", got, want)
	}
	fi, err := os.Stat(got)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want a socket of mode 0600", fi.Mode())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the directory holds %v, want only the socket", ents)
	}
	if l.Addr().String() != want {
		t.Errorf("Addr %s", l.Addr())
	}

	srv := Serve(l, NewHandler(newFake(t), testOptions(HandlerOptions{})))
	if _, err := client(t, got, testToken).Heartbeat(context.Background(), testRun); err != nil {
		t.Errorf("through the socket: %v", err)
	}
	srv.Close()
	if _, err := os.Lstat(got); !os.IsNotExist(err) {
		t.Errorf("the socket is left after Close: %v", err)
	}
}

func TestListenUnixLongPath(t *testing.T) {
	runtime := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", runtime)
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(deep, "agent.sock")
	l, got, err := ListenUnix(want)
	if err != nil {
		t.Fatal(err)
	}
	if got == want || len(got) > MaxSocketPath {
		t.Fatalf("socket at %s (%d bytes), want a short path instead of %s", got, len(got), want)
	}
	if len(runtime)+len("/potato-12345678/agent.sock") <= MaxSocketPath && !strings.HasPrefix(got, runtime+"/") {
		t.Errorf("socket at %s, want it under $XDG_RUNTIME_DIR %s", got, runtime)
	}
	if _, err := os.Lstat(want); !os.IsNotExist(err) {
		t.Errorf("something was made at the long path: %v", err)
	}
	priv := filepath.Dir(got)
	di, err := os.Stat(priv)
	if err != nil || di.Mode().Perm() != 0o700 {
		t.Errorf("private directory %s: %v %v, want mode 0700", priv, di.Mode(), err)
	}
	fi, err := os.Stat(got)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v %v, want 0600", fi.Mode(), err)
	}

	srv := Serve(l, NewHandler(newFake(t), testOptions(HandlerOptions{})))
	if _, err := client(t, got, testToken).Heartbeat(context.Background(), testRun); err != nil {
		t.Errorf("through the returned path: %v", err)
	}
	srv.Close()
	if _, err := os.Lstat(priv); !os.IsNotExist(err) {
		t.Errorf("the private directory is left after Close: %v", err)
	}
}

func TestListenUnixStale(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.sock")

	// A socket left by a process that died.
	old, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	old.SetUnlinkOnClose(false)
	old.Close()
	l, got, err := ListenUnix(path)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	if got != path {
		t.Errorf("socket at %s, want %s", got, path)
	}

	// A live one is left alone.
	if _, _, err := ListenUnix(path); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("over a live socket: %v, want an error", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Errorf("the live socket was broken: %v", err)
	} else {
		c.Close()
	}
	l.Close()

	// So is a file that is not a socket.
	file := filepath.Join(dir, "data")
	os.WriteFile(file, []byte("keep"), 0o644)
	if _, _, err := ListenUnix(file); err == nil {
		t.Error("over a regular file: no error")
	}
	if b, _ := os.ReadFile(file); string(b) != "keep" {
		t.Errorf("the regular file now holds %q", b)
	}
}
