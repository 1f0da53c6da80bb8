package writeback

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Split files and predictions hold a million lines, and a writer needs two
// to four fields of each. encoding/json takes microseconds a line to decode
// them; scanObject checks a line and finds those fields in one pass with no
// allocation, leaving each value as raw JSON. The raw values go to SQLite
// as they are (see Publish), so only the values Go must look at are ever
// decoded.

// maxDepth bounds the nesting of a line. It is below SQLite's own limit for
// JSON (1000), so a line SQLite would refuse is refused here, with its line
// number.
const maxDepth = 500

type scanner struct {
	b     []byte
	i     int
	depth int
}

// scanObject checks that line is one valid JSON object, with only
// whitespace around it, and sets raw[k] to the raw text of the value of
// keys[k]: the last one when a key repeats, nil when it is absent.
func scanObject(line []byte, keys []string, raw [][]byte) error {
	clear(raw)
	s := scanner{b: line}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return s.unexpected("the start of an object")
	}
	if err := s.object(keys, raw); err != nil {
		return err
	}
	s.ws()
	if s.i < len(s.b) {
		return s.unexpected("the end of the line")
	}
	return nil
}

func (s *scanner) ws() {
	b, i := s.b, s.i
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	s.i = i
}

func (s *scanner) unexpected(want string) error {
	if s.i >= len(s.b) {
		return fmt.Errorf("invalid JSON: the line ends where %s should be", want)
	}
	return fmt.Errorf("invalid JSON: %q at byte %d, expecting %s", s.b[s.i], s.i+1, want)
}

func (s *scanner) value() error {
	if s.i >= len(s.b) {
		return s.unexpected("a value")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(nil, nil)
	case c == '[':
		return s.array()
	case c == '"':
		return s.str()
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.unexpected("a value")
}

// object scans an object at s.i; keys and raw are as for scanObject.
func (s *scanner) object(keys []string, raw [][]byte) error {
	if s.depth++; s.depth > maxDepth {
		return errors.New("invalid JSON: nested too deep")
	}
	s.i++ // {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.unexpected("a key")
		}
		k0 := s.i
		if err := s.str(); err != nil {
			return err
		}
		key := s.b[k0:s.i]
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.unexpected("':'")
		}
		s.i++
		s.ws()
		v0 := s.i
		if err := s.value(); err != nil {
			return err
		}
		if keys != nil {
			if k := keyIndex(keys, key); k >= 0 {
				raw[k] = s.b[v0:s.i]
			}
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.unexpected("',' or '}'")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return s.unexpected("',' or '}'")
		}
	}
}

// keyIndex finds the raw key (with its quotes) in keys.
func keyIndex(keys []string, key []byte) int {
	name := key[1 : len(key)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		var s string
		if json.Unmarshal(key, &s) != nil {
			return -1
		}
		name = []byte(s)
	}
	for k, want := range keys {
		if string(name) == want {
			return k
		}
	}
	return -1
}

func (s *scanner) array() error {
	if s.depth++; s.depth > maxDepth {
		return errors.New("invalid JSON: nested too deep")
	}
	s.i++ // [
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if err := s.value(); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.unexpected("',' or ']'")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return s.unexpected("',' or ']'")
		}
	}
}

func (s *scanner) str() error {
	b, i := s.b, s.i+1 // past the opening quote
	for i < len(b) {
		c := b[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		s.i = i
		switch {
		case c == '"':
			s.i++
			return nil
		case c < 0x20:
			return s.unexpected("a string character")
		}
		// A backslash.
		i++
		if i >= len(b) {
			s.i = i
			return s.unexpected("an escape")
		}
		switch b[i] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			i++
		case 'u':
			i++
			for range 4 {
				if i >= len(b) || !isHex(b[i]) {
					s.i = i
					return s.unexpected("a hex digit")
				}
				i++
			}
		default:
			s.i = i
			return s.unexpected("an escape")
		}
	}
	s.i = i
	return s.unexpected(`the closing '"'`)
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
		return s.unexpected("a digit")
	}
	s.i = i
	return nil
}

func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
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

func (s *scanner) literal(lit string) error {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return s.unexpected(fmt.Sprintf("%q", lit))
	}
	s.i += len(lit)
	return nil
}

// stringValue decodes a raw value that must be a JSON string. A missing
// value or null is "".
func stringValue(raw []byte, field string) (string, error) {
	if raw == nil || string(raw) == "null" {
		return "", nil
	}
	if raw[0] != '"' {
		return "", fmt.Errorf("%s is not a string", field)
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return v, nil
}
