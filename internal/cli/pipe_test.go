package cli

import (
	"bytes"
	"syscall"
	"testing"
)

// closedPipe is a standard output whose reader is gone.
type closedPipe struct{}

func (closedPipe) Write([]byte) (int, error) { return 0, syscall.EPIPE }

type helpGrammar struct {
	Run struct{} `cmd:"" help:"Do nothing."`
}

// --help into a pipe that was closed early ("potato-agent --help | head")
// ends quietly with SIGPIPE's status, not with a usage error on standard
// error.
func TestHelpIntoClosedPipe(t *testing.T) {
	var stderr bytes.Buffer
	code := Main("prog", "A program.", "prog(1)", &helpGrammar{},
		Env{Args: []string{"--help"}, Stdout: closedPipe{}, Stderr: &stderr})
	if code != ExitClosedPipe {
		t.Errorf("exit status %d, want %d", code, ExitClosedPipe)
	}
	if stderr.Len() != 0 {
		t.Errorf("standard error %q, want nothing", stderr.String())
	}
}
