package trainer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// IsExec reports whether trainer name is a program (exec:PROGRAM).
func IsExec(name string) bool { return strings.HasPrefix(name, ExecPrefix) }

// ExecName is the trainer name of the program at path: "exec:" + path.
func ExecName(path string) string { return ExecPrefix + path }

// FindProgram looks for the toolkit's program name (potato-agent, for the
// built-in trainers and the remote side of a run) in the directory of
// this executable first, then on PATH.
func FindProgram(name string) (string, error) {
	if self, err := os.Executable(); err == nil {
		if self, err = filepath.EvalSymlinks(self); err == nil {
			p := filepath.Join(filepath.Dir(self), name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed beside %s or on PATH", name, filepath.Base(os.Args[0]))
	}
	return p, nil
}
