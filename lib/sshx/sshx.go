// Package sshx builds the ssh command lines of a backend, copies files
// back over its connection and translates ssh's failures.
//
// A run opens one Conn, an ssh ControlMaster, and every step of the run (the
// probe, the code copy, the agent, the artifacts' copy back) goes through it,
// so the host sees one login. Options follow SPEC S2: BatchMode=yes, so a
// key that needs a prompt fails at once with "Permission denied" instead of
// waiting for a password nobody will type.
//
// Remote commands run through the remote user's login shell. Paths and
// arguments put into them are quoted with shell.Quote, which is right for
// POSIX shells and the csh family.
package sshx

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"potato-training/lib/config"
	"potato-training/lib/shell"
)

// Target says where and as whom ssh logs in. Host is anything ssh accepts
// as a destination, an alias of an ssh_config file included; the zero
// values of the other fields leave the choice to ssh and its config.
type Target struct {
	Host, User   string
	Port         int
	IdentityFile string
	SSHConfig    string // passed as -F
}

// TargetOf takes the target of an ssh or SLURM backend, with a leading ~/
// of identity_file and ssh_config expanded against the local $HOME.
func TargetOf(b *config.Backend) Target {
	return Target{
		Host:         b.Host,
		User:         b.User,
		Port:         b.Port,
		IdentityFile: shell.ExpandHome(b.IdentityFile),
		SSHConfig:    shell.ExpandHome(b.SSHConfig),
	}
}

// Args returns the options every ssh command line of the target starts
// with, in this order: BatchMode, keep-alives, ExitOnForwardFailure, then -F,
// -l, -p and -i for the fields that are set. ssh keeps the first value it
// is given for an option, so these beat the config files.
//
// The keep-alives make a client whose server vanished give up after about
// 15 s. ExitOnForwardFailure turns a forward that could not be set up into
// a failure; without it ssh only warns and carries on with no tunnel.
func (t Target) Args() []string {
	a := []string{
		"-o", "BatchMode=yes",
		"-o", "ServerAliveInterval=5",
		"-o", "ServerAliveCountMax=3",
		"-o", "ExitOnForwardFailure=yes",
	}
	if t.SSHConfig != "" {
		a = append(a, "-F", t.SSHConfig)
	}
	if t.User != "" {
		a = append(a, "-l", t.User)
	}
	if t.Port != 0 {
		a = append(a, "-p", strconv.Itoa(t.Port))
	}
	if t.IdentityFile != "" {
		a = append(a, "-i", t.IdentityFile, "-o", "IdentitiesOnly=yes")
	}
	return a
}

// check refuses what ssh would read as an option or split into words. The
// config validator refuses the same; this is the last line of defence.
func (t Target) check() error {
	switch {
	case t.Host == "":
		return errors.New("ssh target has no host")
	case strings.HasPrefix(t.Host, "-"):
		return fmt.Errorf("ssh host %q starts with \"-\"", t.Host)
	case strings.ContainsFunc(t.Host, isSpaceOrControl):
		return fmt.Errorf("ssh host %q contains a space or a control character", t.Host)
	case strings.HasPrefix(t.User, "-"):
		return fmt.Errorf("ssh user %q starts with \"-\"", t.User)
	case t.Port < 0 || t.Port > 65535:
		return fmt.Errorf("ssh port %d is out of range", t.Port)
	}
	return nil
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// homeRelative makes a remote path usable in quotes: a remote command starts
// in the login's home directory, so "~/x" is written "x" and "~" is ".".
// Other paths are left as they are.
func homeRelative(p string) string {
	if p == "~" || p == "~/" {
		return "."
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return rest
	}
	return p
}
