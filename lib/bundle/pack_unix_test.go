//go:build unix

package bundle

import (
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestPackRefusesFifo(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Skip("cannot make a fifo here:", err)
	}
	_, _, err := Pack(dir, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"pipe" is not a regular file`) {
		t.Fatalf("Pack = %v, want a refusal of the fifo", err)
	}
}
