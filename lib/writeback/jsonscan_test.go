package writeback

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

var scanKeys = []string{"instance_id", "schema_name", "payload", "confidence"}

// checkScan compares scanObject with encoding/json on one input: the same
// verdict on validity, and the same raw value for each key.
func checkScan(t *testing.T, in []byte) {
	t.Helper()
	trimmed := bytes.TrimLeft(in, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' || !utf8.Valid(in) ||
		bytes.Count(in, []byte("{"))+bytes.Count(in, []byte("[")) >= maxDepth {
		return
	}
	raw := make([][]byte, len(scanKeys))
	err := scanObject(in, scanKeys, raw)
	if valid := json.Valid(in); valid != (err == nil) {
		t.Fatalf("scanObject(%q) = %v, json.Valid = %v", in, err, valid)
	}
	if err != nil {
		return
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(in, &m); err != nil {
		t.Fatalf("json.Unmarshal(%q): %v", in, err)
	}
	for k, key := range scanKeys {
		if want, ok := m[key]; !bytes.Equal(raw[k], want) || ok != (raw[k] != nil) {
			t.Errorf("scanObject(%q): %s = %q, want %q", in, key, raw[k], want)
		}
	}
}

var scanSeeds = []string{
	`{}`,
	` { } `,
	`{"instance_id": "a", "schema_name": "s", "payload": {"label": "x|y", "confidence": 0.5}, "confidence": 0.5}`,
	`{"instance_id":"a\"b\\c\u00e9\n","payload":[1,-2.5e+3,true,false,null,{"a":[]}],"confidence":null}`,
	`{"instance\u005fid": "escaped key", "instance_id": "later wins"}`,
	`{"confidence": -0}`, `{"confidence": 01}`, `{"confidence": 1.}`, `{"confidence": .5}`,
	`{"confidence": 1e}`, `{"confidence": -}`, `{"confidence": +1}`, `{"confidence": 1E-7}`,
	`{"a": tru}`, `{"a": nul}`, `{"a": True}`, `{"a": "x\q"}`, `{"a": "\u12"}`, "{\"a\": \"tab\there\"}",
	`{"a": 1,}`, `{,}`, `{"a" 1}`, `{"a": 1 "b": 2}`, `{"a": [1,]}`, `{"a": [1 2]}`, `{"a": 1}}`,
	`{"a": 1} x`, `{"a": 1`, `{"a": "open`, `{"a": "`, `{'a': 1}`, `{a: 1}`, `{"a": [}`, `{"a": {]}`,
	`{"payload": {"nested": {"deep": [[[[]]]]}}, "instance_id": "é"}`,
}

func TestScanObjectAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range scanSeeds {
		checkScan(t, []byte(s))
	}
	// Nesting over maxDepth is refused rather than left for SQLite to refuse.
	deep := `{"payload":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + `}`
	if err := scanObject([]byte(deep), scanKeys, make([][]byte, 4)); err == nil {
		t.Error("scanObject accepted nesting deeper than maxDepth")
	}
}

func FuzzScanObject(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkScan(t, in)
	})
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
