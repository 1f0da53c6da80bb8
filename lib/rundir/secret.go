package rundir

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// maxSecret bounds a secret file: a token is a few dozen bytes.
const maxSecret = 64 << 10

// ReadSecret reads a secret (a token) from a file, refusing one that
// other users could read or change, as ssh refuses such a key: chmod 600
// it. The secret is the file's content, trimmed; an empty one is refused.
// Errors name the file first, for callers to put their words before.
func ReadSecret(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%q is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%q is readable or writable by group or others (mode %04o): run chmod 600 %q", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecret))
	if err != nil {
		return "", err
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("%q is empty", path)
	}
	return secret, nil
}
