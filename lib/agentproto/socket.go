package agentproto

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"potato-training/lib/atomicfile"
)

// ListenUnix listens on a unix socket of mode 0600 at path (SPEC S9) and
// returns the listener and the socket's actual, absolute path, which the
// caller records (run.json agent_socket): a path longer than
// MaxSocketPath is replaced by agent.sock in a new private directory
// (0700) under $XDG_RUNTIME_DIR, or /tmp. A stale socket at path is removed; a live
// one, or a file that is not a socket, is an error. Closing the listener
// removes the socket (and the private directory).
//
// The socket is never reachable with a wider mode: it is bound inside a
// fresh 0700 directory, chmodded to 0600 and only then renamed into place.
// syscall.Umask would do it too, but the umask is process-wide and would
// race with every other file the process creates meanwhile.
func ListenUnix(path string) (net.Listener, string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	if len(abs) <= MaxSocketPath {
		if err := removeStale(abs); err != nil {
			return nil, "", err
		}
		staging, err := mkPrivateDir(filepath.Dir(abs), ".s")
		if err != nil {
			return nil, "", fmt.Errorf("socket %s: %w", abs, err)
		}
		if sock := filepath.Join(staging, "s"); len(sock) <= MaxSocketPath {
			l, err := listenPrivate(sock, abs, "")
			os.Remove(staging)
			if err != nil {
				return nil, "", fmt.Errorf("socket %s: %w", abs, err)
			}
			return l, abs, nil
		}
		// The staging path is a few bytes longer than path itself: take
		// the short path as for a long one.
		os.Remove(staging)
	}
	for _, base := range runtimeDirs() {
		dir, err := mkPrivateDir(base, "potato-")
		if err != nil {
			continue
		}
		sock := filepath.Join(dir, "agent.sock")
		if len(sock) > MaxSocketPath {
			os.Remove(dir)
			continue
		}
		l, err := listenPrivate(sock, sock, dir)
		if err != nil {
			os.Remove(dir)
			return nil, "", fmt.Errorf("socket %s (for %s, longer than %d bytes): %w", sock, abs, MaxSocketPath, err)
		}
		return l, sock, nil
	}
	return nil, "", fmt.Errorf("socket %s is longer than %d bytes and no short private directory could be made under $XDG_RUNTIME_DIR or /tmp", abs, MaxSocketPath)
}

func runtimeDirs() []string {
	var dirs []string
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return append(dirs, "/tmp")
}

// mkPrivateDir makes a new directory of mode 0700 in parent, named prefix
// and eight random hex digits (short, for the socket path's sake).
func mkPrivateDir(parent, prefix string) (string, error) {
	var b [4]byte
	for range 100 {
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		dir := filepath.Join(parent, prefix+hex.EncodeToString(b[:]))
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", errors.New("no unused name for a private directory")
}

// removeStale removes a socket at path that nobody listens on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("socket %s is in use by a running process", path)
	}
	return os.Remove(path)
}

// listenPrivate binds sock, which is in a directory only this user can
// enter, makes it 0600 and moves it to final when that differs. privDir,
// when set, is removed with the socket on Close.
func listenPrivate(sock, final, privDir string) (net.Listener, error) {
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// The socket may move; removal on Close is done by path below.
	ul.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		ul.Close()
		os.Remove(sock)
		return nil, err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		return fail(err)
	}
	if final != sock {
		if err := atomicfile.Promote(sock, final); err != nil {
			return fail(err)
		}
	}
	fi, err := os.Lstat(final)
	if err != nil {
		ul.Close()
		return nil, err
	}
	return &unixListener{UnixListener: ul, path: final, fi: fi, dir: privDir}, nil
}

// unixListener removes its socket on Close, unless another one has
// replaced it by then.
type unixListener struct {
	*net.UnixListener
	path string
	fi   fs.FileInfo
	dir  string
	once sync.Once
	err  error
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *unixListener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.fi) {
			os.Remove(l.path)
		}
		if l.dir != "" {
			os.Remove(l.dir)
		}
	})
	return l.err
}
