package rundir

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// CleanText is s as a run's log and a terminal may show it: what a trainer
// or an agent wrote is text, never a command to the terminal. Control
// characters but tab and newline (C0, DEL and C1: ESC starts the escape
// sequences that move the cursor, retitle the window or rewrite the
// screen; CR overwrites a line), the marks that reorder bidirectional
// text, and bytes that are not UTF-8 are written as Go escapes, \x1b,
// \u202e, so that they show instead of acting.
func CleanText(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && unsafeRune(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	switch {
	case r == '\t' || r == '\n':
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}
