// Package shell holds what the toolkit knows of the POSIX shell when it
// writes a command line or reads a path outside one: how to quote a word so
// that sh reads it back as it was, and how a leading ~ names the home
// directory.
package shell

import (
	"os"
	"strings"
)

// Quote quotes s as one word for a POSIX shell (and csh): a word of only
// safe characters is returned as it is, anything else as SingleQuote
// writes it. A leading ~ is quoted, so it is not expanded.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	for _, r := range s {
		if !isSafe(r) {
			return SingleQuote(s)
		}
	}
	return s
}

// SingleQuote puts s in single quotes, where each single quote closes the
// quotes, is escaped and opens them again:
//
//	it's here  ->  'it'\''s here'
func SingleQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func isSafe(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return true
	}
	return strings.ContainsRune("_@%+:,./-", r)
}

// ExpandHome replaces a leading ~/ (or a lone ~) with the local $HOME, as
// the shell would; other paths, ~user/ ones included, and every path when
// $HOME is unset, are returned as they are.
func ExpandHome(p string) string {
	home := os.Getenv("HOME")
	if home == "" {
		return p
	}
	if p == "~" {
		return home
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return strings.TrimSuffix(home, "/") + "/" + rest
	}
	return p
}
