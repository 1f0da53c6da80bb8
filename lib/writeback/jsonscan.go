package writeback

import (
	"errors"
	"fmt"

	"potato-training/lib/jsonscan"
)

// Split files and predictions hold a million lines, and a writer needs two
// to four fields of each: scanObject (lib/jsonscan) checks a line and finds
// them in one pass, leaving each value as raw JSON. The raw values go to
// SQLite as they are (see Publish), so only the values Go must look at are
// ever decoded.

// maxDepth bounds the nesting of a line. It is below SQLite's own limit for
// JSON (1000), so a line SQLite would refuse is refused here, with its line
// number.
const maxDepth = 500

// scanObject checks that line is one valid JSON object, with only
// whitespace around it, and sets raw[k] to the raw text of the value of
// keys[k]: the last one when a key repeats, nil when it is absent.
func scanObject(line []byte, keys []string, raw [][]byte) error {
	err := jsonscan.Object(line, keys, raw, maxDepth)
	if err == nil {
		return nil
	}
	var se *jsonscan.SyntaxError
	if errors.As(err, &se) {
		want := expecting[se.Want]
		if se.Want == jsonscan.WantLiteral {
			want = literals[line[se.Offset]]
		}
		if se.Offset >= len(line) {
			return fmt.Errorf("invalid JSON: the line ends where %s should be", want)
		}
		return fmt.Errorf("invalid JSON: %q at byte %d, expecting %s", line[se.Offset], se.Offset+1, want)
	}
	if err == jsonscan.ErrTooDeep {
		return errors.New("invalid JSON: nested too deep")
	}
	return err
}

// expecting words what the grammar wanted.
var expecting = map[jsonscan.Want]string{
	jsonscan.WantObject:         "the start of an object",
	jsonscan.WantKey:            "a key",
	jsonscan.WantColon:          "':'",
	jsonscan.WantCommaOrBrace:   "',' or '}'",
	jsonscan.WantCommaOrBracket: "',' or ']'",
	jsonscan.WantEnd:            "the end of the line",
	jsonscan.WantValue:          "a value",
	jsonscan.WantStringByte:     "a string character",
	jsonscan.WantEscape:         "an escape",
	jsonscan.WantHexDigit:       "a hex digit",
	jsonscan.WantQuote:          `the closing '"'`,
	jsonscan.WantDigit:          "a digit",
}

// literals words a literal wanted, by the byte it begins with.
var literals = map[byte]string{'t': `"true"`, 'f': `"false"`, 'n': `"null"`}

// stringValue decodes a raw value that must be a JSON string. A missing
// value or null is "".
func stringValue(raw []byte, field string) (string, error) {
	if raw == nil || string(raw) == "null" {
		return "", nil
	}
	if raw[0] != '"' {
		return "", fmt.Errorf("%s is not a string", field)
	}
	v, _ := jsonscan.String(raw)
	return v, nil
}
