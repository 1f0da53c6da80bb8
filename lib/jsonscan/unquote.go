package jsonscan

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// String decodes raw, the raw JSON of a string as Object leaves it (its
// quotes included, already checked), to what encoding/json would give:
// escapes decoded, and each byte of invalid UTF-8 and each lone
// surrogate escape replaced by U+FFFD. ok is false when raw is not a
// string. A text with no escape costs one copy; one with escapes, such as
// an email's "\n", one pass more, where encoding/json scans it again
// first.
func String(raw []byte) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	i := 0
	for i < len(in) && in[i] != '\\' && in[i] < utf8.RuneSelf {
		i++
	}
	if i == len(in) {
		return string(in), true
	}
	out := appendUnquoted(make([]byte, 0, len(in)), in, i)
	// out is new and never written again: the string may be its bytes,
	// as strings.Builder makes its string, rather than a copy of them.
	return unsafe.String(unsafe.SliceData(out), len(out)), true
}

// appendUnquoted appends the decoded string body in to out; in[:i] is
// plain ASCII already checked.
func appendUnquoted(out, in []byte, i int) []byte {
	out = append(out, in[:i]...)
	for i < len(in) {
		c := in[i]
		switch {
		case c == '\\':
			if i+1 >= len(in) {
				return append(out, "\uFFFD"...)
			}
			switch e := in[i+1]; e {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(in, i+2)
				if !ok {
					return append(out, "\uFFFD"...)
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if r2, ok := hex4(in, i+2); ok && i+1 < len(in) && in[i] == '\\' && in[i+1] == 'u' {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							i += 6
							out = utf8.AppendRune(out, dec)
							continue
						}
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
				continue
			default: // '"', '\\', '/'
				out = append(out, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			j := i + 1
			for j < len(in) && in[j] != '\\' && in[j] < utf8.RuneSelf {
				j++
			}
			out = append(out, in[i:j]...)
			i = j
		default:
			r, size := utf8.DecodeRune(in[i:])
			if r == utf8.RuneError && size == 1 {
				out = append(out, "\uFFFD"...)
			} else {
				out = append(out, in[i:i+size]...)
			}
			i += size
		}
	}
	return out
}

// hex4 reads the four hex digits at in[i:].
func hex4(in []byte, i int) (rune, bool) {
	if i+4 > len(in) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(in[i:i+4]), 16, 32)
	return rune(v), err == nil
}
