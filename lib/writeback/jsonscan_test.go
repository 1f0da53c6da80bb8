package writeback

import (
	"strings"
	"testing"
)

var scanKeys = []string{"instance_id", "schema_name", "payload", "confidence"}

// TestScanObjectMessages checks how a bad line is worded; lib/jsonscan
// checks the grammar itself against encoding/json.
func TestScanObjectMessages(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`[1]`, `invalid JSON: '[' at byte 1, expecting the start of an object`},
		{`{"a": 1,}`, `invalid JSON: '}' at byte 9, expecting a key`},
		{`{"a" 1}`, `invalid JSON: '1' at byte 6, expecting ':'`},
		{`{"a": 1`, `invalid JSON: the line ends where ',' or '}' should be`},
		{`{"a": [1 2]}`, `invalid JSON: '2' at byte 10, expecting ',' or ']'`},
		{`{"a": 1} x`, `invalid JSON: 'x' at byte 10, expecting the end of the line`},
		{`{"a": }`, `invalid JSON: '}' at byte 7, expecting a value`},
		{`{"a": nul}`, `invalid JSON: 'n' at byte 7, expecting "null"`},
		{`{"a": True}`, `invalid JSON: 'T' at byte 7, expecting a value`},
		{"{\"a\": \"\x01\"}", `invalid JSON: '\x01' at byte 8, expecting a string character`},
		{`{"a": "x\q"}`, `invalid JSON: 'q' at byte 10, expecting an escape`},
		{`{"a": "\u12"}`, `invalid JSON: '"' at byte 12, expecting a hex digit`},
		{`{"a": "open`, `invalid JSON: the line ends where the closing '"' should be`},
		{`{"a": -}`, `invalid JSON: '}' at byte 8, expecting a digit`},
	} {
		err := scanObject([]byte(tc.in), scanKeys, make([][]byte, len(scanKeys)))
		if err == nil || err.Error() != tc.want {
			t.Errorf("scanObject(%q) = %v, want %s", tc.in, err, tc.want)
		}
	}
	// Nesting over maxDepth is refused rather than left for SQLite to refuse.
	deep := `{"payload":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}`
	if err := scanObject([]byte(deep), scanKeys, make([][]byte, 4)); err == nil || err.Error() != "invalid JSON: nested too deep" {
		t.Errorf("scanObject with nesting deeper than maxDepth: %v", err)
	}
}

func TestStringValue(t *testing.T) {
	for _, c := range []struct {
		raw, want string
		err       bool
	}{
		{`"abc"`, "abc", false},
		{`"a\u00e9\"b"`, "aé\"b", false},
		{`null`, "", false},
		{``, "", false},
		{`12`, "", true},
		{`["a"]`, "", true},
	} {
		var raw []byte
		if c.raw != "" {
			raw = []byte(c.raw)
		}
		got, err := stringValue(raw, "instance_id")
		if got != c.want || (err != nil) != c.err {
			t.Errorf("stringValue(%s) = %q, %v; want %q, error %v", c.raw, got, err, c.want, c.err)
		}
	}
}
