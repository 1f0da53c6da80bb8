// Package jsonscan checks a JSON object and picks out the raw JSON of the
// members a reader wants, in one pass that allocates nothing (but for a key
// written with an escape).
//
// Data files, split files and predictions hold a million lines, and their
// readers need two to four fields of each. encoding/json decodes every
// field of every line (scanned twice, allocated once) and takes
// microseconds a line; Object leaves each value as raw JSON, so that only
// the values Go must look at are ever decoded.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Want is what the grammar needed where a SyntaxError stopped.
type Want int

const (
	WantObject         Want = iota // the '{' that starts the object
	WantKey                        // a member's key, a string
	WantColon                      // ':' after a key
	WantCommaOrBrace               // ',' or '}' after a member
	WantCommaOrBracket             // ',' or ']' after an array element
	WantEnd                        // only white space after the object
	WantValue                      // a value
	WantLiteral                    // the rest of true, false or null, begun at Offset
	WantStringByte                 // a string's next byte, not a control character
	WantEscape                     // an escape after a backslash
	WantHexDigit                   // a hex digit of a \u escape
	WantQuote                      // a string's closing quote, at the end of the input
	WantDigit                      // a digit of a number
)

// SyntaxError is input that is not the JSON Object wants. Each reader
// words it in its own messages, from what was wanted and what was found.
type SyntaxError struct {
	Offset int // index of the byte found in the input; its length at the end
	Want   Want
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d", e.Offset+1)
}

// ErrTooDeep is an object or array nested in more than the maximum.
var ErrTooDeep = errors.New("nested too deep")

// Object checks that b is exactly one JSON object, with only white space
// around it, and sets vals[k] to the raw JSON of its member named keys[k]
// (the last one, when a key repeats), or nil when it has none. maxDepth
// bounds how many objects and arrays may nest, the outer object included,
// as encoding/json's own limit (10000) does. Errors are a *SyntaxError or
// ErrTooDeep.
func Object(b []byte, keys []string, vals [][]byte, maxDepth int) error {
	_, err := ObjectOthers(b, keys, vals, maxDepth)
	return err
}

// ObjectOthers is Object, and counts the members of the object whose key
// is none of keys (every member when keys is empty): a reader that must
// refuse a key it does not know learns that it met one.
func ObjectOthers(b []byte, keys []string, vals [][]byte, maxDepth int) (others int, err error) {
	clear(vals)
	s := scanner{b: b, max: maxDepth}
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return 0, s.fail(WantObject)
	}
	if err := s.object(keys, vals); err != nil {
		return 0, err
	}
	s.space()
	if s.i < len(s.b) {
		return 0, s.fail(WantEnd)
	}
	return s.others, nil
}

type scanner struct {
	b          []byte
	i          int
	depth, max int
	others     int // members of the outer object not among the keys
}

func (s *scanner) fail(want Want) error {
	return &SyntaxError{Offset: s.i, Want: want}
}

func (s *scanner) space() {
	b, i := s.b, s.i
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	s.i = i
}

func (s *scanner) value() error {
	if s.i >= len(s.b) {
		return s.fail(WantValue)
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.str()
	case c == '{':
		return s.object(nil, nil)
	case c == '[':
		return s.array()
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail(WantValue)
}

// object scans an object at s.i, setting vals as Object does.
func (s *scanner) object(keys []string, vals [][]byte) error {
	if s.depth++; s.depth > s.max {
		return ErrTooDeep
	}
	s.i++ // {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.fail(WantKey)
		}
		k0 := s.i
		if err := s.str(); err != nil {
			return err
		}
		k1 := s.i
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.fail(WantColon)
		}
		s.i++
		s.space()
		v0 := s.i
		if err := s.value(); err != nil {
			return err
		}
		if s.depth == 1 {
			name, known := KeyText(s.b[k0:k1]), false
			for k, want := range keys {
				if string(name) == want {
					vals[k] = s.b[v0:s.i]
					known = true
				}
			}
			if !known {
				s.others++
			}
		}
		s.space()
		if s.i >= len(s.b) {
			return s.fail(WantCommaOrBrace)
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return s.fail(WantCommaOrBrace)
		}
	}
}

// KeyText is the name of a key given with its quotes, escapes resolved;
// only a key with an escape is copied. A key that is not a JSON string
// gives nil.
func KeyText(key []byte) []byte {
	name := key[1 : len(key)-1]
	if bytes.IndexByte(name, '\\') < 0 {
		return name
	}
	var k string
	if json.Unmarshal(key, &k) != nil {
		return nil
	}
	return []byte(k)
}

func (s *scanner) array() error {
	if s.depth++; s.depth > s.max {
		return ErrTooDeep
	}
	s.i++ // [
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if err := s.value(); err != nil {
			return err
		}
		s.space()
		if s.i >= len(s.b) {
			return s.fail(WantCommaOrBracket)
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.space()
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return s.fail(WantCommaOrBracket)
		}
	}
}

// str scans the string whose opening quote is at s.i.
func (s *scanner) str() error {
	b, i := s.b, s.i+1
	for i < len(b) {
		// Eight plain bytes at a time: the texts of items are most of
		// what is scanned.
		for i+8 <= len(b) && plainWord(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		c := b[i]
		if plainStringByte[c] {
			i++
			continue
		}
		s.i = i
		switch {
		case c == '"':
			s.i++
			return nil
		case c < 0x20:
			return s.fail(WantStringByte)
		}
		// A backslash.
		i++
		if i >= len(b) {
			s.i = i
			return s.fail(WantEscape)
		}
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i++
		case 'u':
			i++
			for range 4 {
				if i >= len(b) || !isHex(b[i]) {
					s.i = i
					return s.fail(WantHexDigit)
				}
				i++
			}
		default:
			s.i = i
			return s.fail(WantEscape)
		}
	}
	s.i = i
	return s.fail(WantQuote)
}

// plainStringByte marks the bytes a string holds as they are: not a quote,
// not a backslash, not a control character.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// plainWord reports whether the eight bytes of x are all plainStringByte:
// none below 0x20, none a quote or a backslash. (x - 0x01·n) & ^x & 0x80
// in every byte is the classic test for a byte of x below n (n ≤ 0x80);
// a byte equal to q is a zero byte of x ^ q.
func plainWord(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := func(x, n uint64) uint64 { return (x - ones*n) & ^x & highs }
	return below(x, 0x20)|below(x^(ones*'"'), 1)|below(x^(ones*'\\'), 1) == 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func (s *scanner) digits() error {
	b, i := s.b, s.i
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	if i == s.i {
		return s.fail(WantDigit)
	}
	s.i = i
	return nil
}

func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++ // no more integer digits after a leading zero
	} else if err := s.digits(); err != nil {
		return err
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if err := s.digits(); err != nil {
			return err
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if err := s.digits(); err != nil {
			return err
		}
	}
	return nil
}

func (s *scanner) literal(word string) error {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.fail(WantLiteral)
	}
	s.i += len(word)
	return nil
}
