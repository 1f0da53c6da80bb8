package sshx

import (
	"fmt"
	"regexp"
	"strings"
)

// The texts users see (SPEC F1, F7). Tests match them.
const (
	connErrorFormat  = "ssh to %s failed: %s"
	stallErrorFormat = "The copy from %s sent nothing for %d s"
)

// The reasons of a ConnError that ssh's own messages are reduced to. Other
// failures carry ssh's last line of stderr.
const (
	ReasonPermissionDenied = "Permission denied"
	ReasonRefused          = "Connection refused"
	ReasonResolve          = "Could not resolve hostname"
	ReasonTimedOut         = "Connection timed out"
	ReasonHostKey          = "Host key verification failed"
	ReasonClosed           = "Connection closed"
	ReasonReset            = "Connection reset"
	ReasonInUse            = "the control socket is in use by another connection"
)

// ConnError is a failure of ssh itself (ssh exits 255): the login, the
// connection or a forward, never the remote command. Host is the host as
// configured, an alias included.
type ConnError struct {
	Host   string
	Reason string
}

func (e *ConnError) Error() string { return fmt.Sprintf(connErrorFormat, e.Host, e.Reason) }

// RemoteError is a remote command that ran and exited with a status other
// than 0. Stderr is what the command wrote to its standard error.
type RemoteError struct {
	Host     string
	Command  string
	ExitCode int
	Stderr   string
}

func (e *RemoteError) Error() string {
	s := fmt.Sprintf("remote command %q on %s exited with status %d", shortCommand(e.Command), e.Host, e.ExitCode)
	if l := LastLine(e.Stderr); l != "" {
		s += ": " + l
	}
	return s
}

// StallError is a copy that was stopped because no bytes arrived for
// Seconds.
type StallError struct {
	Host    string
	Seconds int
}

func (e *StallError) Error() string { return fmt.Sprintf(stallErrorFormat, e.Host, e.Seconds) }

// reasons maps a piece of ssh's stderr to a reason, the first match in this
// order winning: a changed host key prints a long banner whose last line is
// the verdict, and a refused login may follow warnings about keys.
var reasons = []struct{ match, reason string }{
	{"Host key verification failed", ReasonHostKey},
	{"Permission denied (", ReasonPermissionDenied},
	{"Could not resolve hostname", ReasonResolve},
	{"Connection refused", ReasonRefused},
	{"timed out", ReasonTimedOut},
	{"Connection closed", ReasonClosed},
	{"closed by remote host", ReasonClosed},
	{"Connection reset", ReasonReset},
	{"disabling multiplexing", ReasonInUse},
}

// sshMarks start lines that only ssh writes; with exit status 255 they tell
// ssh's own failure from a remote command that exited 255.
var sshMarks = []string{
	"ssh:", "mux_client", "muxclient", "Control socket", "ControlSocket",
	"Error: remote port forwarding failed", "Error: local port forwarding failed",
	"channel ", "kex_exchange_identification", "Bad owner or permissions",
	"Can't open user config file", "Load key", "no such identity",
	"Timeout, server", "Warning: remote port forwarding failed",
	"Connection to ", "Received disconnect", "Disconnected from",
}

var connectLine = regexp.MustCompile(`^ssh: connect to host \S+ port \d+: (.+)$`)

// sshLines returns the non-empty lines of stderr, leaving out rsync's own
// messages ("rsync: ...", "rsync error: ...", which may quote a remote
// "Permission denied (13)").
func sshLines(stderr []byte) []string {
	var out []string
	for _, l := range strings.Split(string(stderr), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "rsync") {
			continue
		}
		out = append(out, l)
	}
	return out
}

// knownReason returns the reason for the first entry of reasons found in
// the lines, or "".
func knownReason(lines []string) string {
	for _, r := range reasons {
		for _, l := range lines {
			if strings.Contains(l, r.match) {
				return r.reason
			}
		}
	}
	return ""
}

// isSSHFailure says whether stderr carries a message of ssh's own.
func isSSHFailure(stderr []byte) bool {
	lines := sshLines(stderr)
	if knownReason(lines) != "" {
		return true
	}
	for _, l := range lines {
		for _, m := range sshMarks {
			if strings.HasPrefix(l, m) {
				return true
			}
		}
	}
	return false
}

// translate makes the ConnError of an ssh that exited 255 with stderr.
func translate(host string, stderr []byte) *ConnError {
	lines := sshLines(stderr)
	if r := knownReason(lines); r != "" {
		return &ConnError{Host: host, Reason: r}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if strings.HasPrefix(l, "Warning:") || strings.HasPrefix(l, "@") {
			continue
		}
		if m := connectLine.FindStringSubmatch(l); m != nil {
			l = m[1]
		}
		return &ConnError{Host: host, Reason: strings.TrimSuffix(l, ".")}
	}
	return &ConnError{Host: host, Reason: "ssh exited with status 255"}
}

// LastLine is the last non-empty line of s, trimmed: the line of a
// command's stderr that says why it failed.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// shortCommand is the first line of a remote command, cut to 60 runes, for
// messages: some commands are whole scripts.
func shortCommand(c string) string {
	c = strings.TrimSpace(c)
	cut := false
	if i := strings.IndexByte(c, '\n'); i >= 0 {
		c, cut = c[:i], true
	}
	if r := []rune(c); len(r) > 60 {
		c, cut = string(r[:60]), true
	}
	if cut {
		c += "..."
	}
	return c
}
