package project

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"potato-training/lib/jsonscan"
)

// Data files can hold millions of items, and encoding/json decodes every
// field of every item (twice scanned, once allocated) when a trainer needs
// two or three of them. This file reads them in one pass that allocates only
// for the fields asked for: jsonStream cuts the input into top-level values
// and counts lines on the way, and scanObject (lib/jsonscan) validates one
// value and picks out the wanted fields' raw JSON.

// jsonStream reads the top-level values of a JSON text from r.
type jsonStream struct {
	r        io.Reader
	buf      []byte
	pos, end int // the unread bytes are buf[pos:end]
	mark     int // start of the value being cut, kept across refills; -1 if none
	line     int // the line of buf[pos]
	err      error
	open     []byte // the brackets cut has open
}

func newJSONStream(r io.Reader) *jsonStream {
	s := &jsonStream{r: r, buf: make([]byte, 256<<10), mark: -1, line: 1}
	for s.end < 3 && s.fill() {
	}
	if s.end >= 3 && string(s.buf[:3]) == "\ufeff" {
		s.pos = 3
	}
	return s
}

// fill reads more input, keeping buf[mark:] (or buf[pos:]) and growing buf
// when it is all kept. It reports whether anything was read.
func (s *jsonStream) fill() bool {
	if s.err != nil {
		return false
	}
	keep := s.pos
	if s.mark >= 0 {
		keep = s.mark
	}
	if keep > 0 {
		n := copy(s.buf, s.buf[keep:s.end])
		s.pos -= keep
		if s.mark >= 0 {
			s.mark -= keep
		}
		s.end = n
	}
	if s.end == len(s.buf) {
		s.buf = append(s.buf, make([]byte, len(s.buf))...)
	}
	for {
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		if err != nil {
			s.err = err
		}
		if n > 0 || err != nil {
			return n > 0
		}
	}
}

// readErr is the error for input that ended in the middle of a value.
func (s *jsonStream) readErr() error {
	if s.err != nil && s.err != io.EOF {
		return s.err
	}
	return io.ErrUnexpectedEOF
}

// peek skips white space and returns the next byte without consuming it;
// ok is false at the end of the input.
func (s *jsonStream) peek() (c byte, ok bool) {
	for {
		for s.pos < s.end {
			switch c := s.buf[s.pos]; c {
			case '\n':
				s.line++
			case ' ', '\t', '\r':
			default:
				return c, true
			}
			s.pos++
		}
		if !s.fill() {
			return 0, false
		}
	}
}

// cut returns the bytes of the object or array starting at buf[pos], by
// matching brackets outside strings; scanObject then checks the grammar.
// It stops early at a bracket that does not match and at a raw newline in a
// string, both invalid JSON, so that one bad line of a JSON Lines file is
// not read on to the end of the file. Lines are counted outside strings.
// The slice is valid until the next call.
func (s *jsonStream) cut() ([]byte, error) {
	s.mark = s.pos
	defer func() { s.mark = -1 }()
	s.open = s.open[:0]
	inString := false
	i := s.pos
	for {
		if i >= s.end {
			s.pos = i
			if !s.fill() {
				return nil, s.readErr()
			}
			i = s.pos
		}
		if inString {
			// Jump to the closing quote (or a raw newline, which ends the
			// line), stepping over the escapes before it whole. The quote
			// is looked for once, not again after each escape: a text of
			// many lines has an escape (\n) every few dozen bytes.
			rest := s.buf[i:s.end]
			q := bytes.IndexByte(rest, '"')
			if q < 0 {
				q = len(rest)
			}
			nl := bytes.IndexByte(rest[:q], '\n')
			if nl >= 0 {
				q = nl
			}
			j, again := 0, false
			for {
				e := bytes.IndexByte(rest[j:q], '\\')
				if e < 0 {
					break
				}
				j += e
				if i+j+1 >= s.end {
					i += j
					s.pos = i
					if !s.fill() {
						return nil, s.readErr()
					}
					i = s.pos
					again = true
					break
				}
				j += 2
				if rest[j-1] == '\n' {
					s.pos = i + j
					return s.buf[s.mark:s.pos], nil
				}
				if j > q {
					// The escape took the quote at q: look again past it.
					i += j
					again = true
					break
				}
			}
			if again {
				continue
			}
			if nl >= 0 {
				s.pos = i + nl + 1
				return s.buf[s.mark:s.pos], nil
			}
			i += q
			if q < len(rest) {
				i++
				inString = false
			}
			continue
		}
		c := s.buf[i]
		i++
		switch c {
		case '"':
			inString = true
		case '{', '[':
			s.open = append(s.open, c)
		case '}', ']':
			top := s.open[len(s.open)-1]
			s.open = s.open[:len(s.open)-1]
			if len(s.open) == 0 || top != c-2 {
				// c-2 turns '}' into '{' and ']' into '['.
				s.pos = i
				return s.buf[s.mark:i], nil
			}
		case '\n':
			s.line++
		}
	}
}

// scanObject checks that b is exactly one JSON object and sets vals[k] to
// the raw JSON of its member named keys[k] (the last one, if repeated), or
// nil. An error's offset is a byte index into b.
func scanObject(b []byte, keys []string, vals [][]byte) error {
	err := jsonscan.Object(b, keys, vals, maxDepth)
	if err == nil {
		return nil
	}
	var se *jsonscan.SyntaxError
	if errors.As(err, &se) {
		msg := syntaxText(se.Want, se.Offset == len(b))
		if se.Offset < len(b) {
			msg = fmt.Sprintf("%s, found %q", msg, b[se.Offset])
		} else {
			msg += ", found the end of the value"
		}
		return &jsonSyntaxError{msg: msg, Offset: se.Offset}
	}
	if err == jsonscan.ErrTooDeep {
		return errTooDeep
	}
	return err
}

// syntaxText words what the grammar wanted; atEnd is whether the value
// ended there.
func syntaxText(want jsonscan.Want, atEnd bool) string {
	switch want {
	case jsonscan.WantObject:
		return "expected '{'"
	case jsonscan.WantKey:
		return "expected a string"
	case jsonscan.WantColon:
		return "expected ':' after an object key"
	case jsonscan.WantCommaOrBrace:
		return "expected ',' or '}' after an object value"
	case jsonscan.WantCommaOrBracket:
		return "expected ',' or ']' after an array element"
	case jsonscan.WantEnd:
		return "unexpected data after the object"
	case jsonscan.WantLiteral:
		return "invalid literal"
	case jsonscan.WantStringByte:
		return "control character in a string"
	case jsonscan.WantEscape:
		if atEnd {
			return "unfinished escape"
		}
		return "invalid escape"
	case jsonscan.WantHexDigit:
		return "invalid \\u escape"
	case jsonscan.WantQuote:
		return "unterminated string"
	case jsonscan.WantDigit:
		return "invalid number"
	}
	return "expected a value"
}

// jsonSyntaxError is a grammar error at byte offset Offset of a value.
type jsonSyntaxError struct {
	msg    string
	Offset int
}

func (e *jsonSyntaxError) Error() string { return e.msg }

var errTooDeep = errors.New("value nested too deeply")

// maxDepth is how deeply values may nest, as encoding/json allows.
const maxDepth = 10000

// utf8Reader passes on the bytes of r and fails at the first that are not
// UTF-8: encoding/json would read them as U+FFFD, and a label so mangled
// would silently match nothing. Each read is checked before it is passed
// on, but for a rune cut at its end, checked with the next read.
type utf8Reader struct {
	r    io.Reader
	off  int64  // bytes passed on before this read
	tail []byte // the start of a rune cut at the end of the last read
}

func newUTF8Reader(r io.Reader) *utf8Reader { return &utf8Reader{r: r} }

func (u *utf8Reader) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	b := p[:n]
	start := 0
	if len(u.tail) > 0 && n > 0 {
		k := min(utf8.UTFMax-len(u.tail), n)
		buf := append(u.tail[:len(u.tail):len(u.tail)], b[:k]...)
		if !utf8.FullRune(buf) { // still cut: all of b is more of it
			u.tail = buf
			return u.passed(n, err)
		}
		// A valid rune is longer than the tail, which was not one.
		r, size := utf8.DecodeRune(buf)
		if r == utf8.RuneError && size == 1 {
			return 0, u.invalid(-int64(len(u.tail)))
		}
		start, u.tail = size-len(u.tail), u.tail[:0]
	}
	rest := b[start:]
	cut := len(rest)
	for j := len(rest) - 1; j >= 0 && j >= len(rest)-utf8.UTFMax+1; j-- {
		if utf8.RuneStart(rest[j]) {
			if !utf8.FullRune(rest[j:]) {
				cut = j
			}
			break
		}
	}
	if !utf8.Valid(rest[:cut]) {
		i := 0
		for i < cut {
			r, size := utf8.DecodeRune(rest[i:cut])
			if r == utf8.RuneError && size == 1 {
				break
			}
			i += size
		}
		return 0, u.invalid(int64(start + i))
	}
	u.tail = append(u.tail, rest[cut:]...)
	return u.passed(n, err)
}

// passed counts n bytes passed on; the input must not end in a cut rune.
func (u *utf8Reader) passed(n int, err error) (int, error) {
	if err == io.EOF && len(u.tail) > 0 {
		return 0, u.invalid(int64(n - len(u.tail)))
	}
	u.off += int64(n)
	return n, err
}

func (u *utf8Reader) invalid(at int64) error {
	return fmt.Errorf("not valid UTF-8 at byte %d", u.off+at)
}
