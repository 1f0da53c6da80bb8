package jsonscan

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// encodingJSONDepth is encoding/json's own limit, which Object is given so
// that the two agree on every input.
const encodingJSONDepth = 10000

var scanKeys = []string{"id", "text", "instance_id", "schema_name", "payload", "confidence"}

// checkScan compares Object with encoding/json on one input: the same
// verdict on whether it is one object, and the same raw value for each key.
func checkScan(t *testing.T, in []byte) {
	t.Helper()
	if bytes.Count(in, []byte("{"))+bytes.Count(in, []byte("[")) >= encodingJSONDepth {
		return
	}
	raw := make([][]byte, len(scanKeys))
	err := Object(in, scanKeys, raw, encodingJSONDepth)
	var m map[string]json.RawMessage
	stdErr := json.Unmarshal(in, &m)
	if isObject := stdErr == nil && m != nil; isObject != (err == nil) {
		t.Fatalf("Object(%q) = %v, encoding/json: %v", in, err, stdErr)
	}
	if err != nil {
		return
	}
	for k, key := range scanKeys {
		if want, ok := m[key]; !bytes.Equal(raw[k], want) || ok != (raw[k] != nil) {
			t.Errorf("Object(%q): %s = %q, want %q", in, key, raw[k], want)
		}
	}
	// ObjectOthers: some member is of another key exactly when the decoded
	// object has a key that is not one of scanKeys.
	others, _ := ObjectOthers(in, scanKeys, raw, encodingJSONDepth)
	stray := false
	for k := range m {
		stray = stray || !slices.Contains(scanKeys, k)
	}
	if (others > 0) != stray {
		t.Errorf("ObjectOthers(%q) = %d; encoding/json's keys %v", in, others, slices.Collect(maps.Keys(m)))
	}
}

var scanSeeds = []string{
	`{}`,
	` { } `,
	`null`, `[]`, `"x"`, `1`,
	`{"id": 1}`, `{"id": "a", "text": "b", "x": [1, {"y": null}]}`,
	`{"i\u0064": "\ud800"}`, `{"id": 01}`, `{"id": 1,}`, `{"a": 1.}`,
	`{"a": -0.0e-0}`, `{"a": "\u00"}`, `{"id": "a"} `, `{"id": 1} x`,
	"{\"a\": \"\x01\"}", `{"id": "\"\\\/\b\f\n\r\t"}`, `{"text": 1e999}`,
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

func TestObjectAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range scanSeeds {
		checkScan(t, []byte(s))
	}
}

func FuzzObject(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkScan(t, in)
	})
}

// TestObjectDepth checks the limit counts every object and array, the
// outer object included, as encoding/json counts them.
func TestObjectDepth(t *testing.T) {
	nest := func(n int, inner string) []byte {
		return []byte(`{"a":` + strings.Repeat("[", n-1) + inner + strings.Repeat("]", n-1) + `}`)
	}
	for _, inner := range []string{"", "1"} {
		if err := Object(nest(encodingJSONDepth, inner), nil, nil, encodingJSONDepth); err != nil {
			t.Errorf("%d deep, inner %q: %v", encodingJSONDepth, inner, err)
		}
		in := nest(encodingJSONDepth+1, inner)
		if err := Object(in, nil, nil, encodingJSONDepth); err != ErrTooDeep {
			t.Errorf("%d deep, inner %q: %v, want ErrTooDeep", encodingJSONDepth+1, inner, err)
		}
		if json.Valid(in) {
			t.Errorf("encoding/json takes %d deep", encodingJSONDepth+1)
		}
	}
}

func TestSyntaxError(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   Want
		offset int
	}{
		{` [`, WantObject, 1},
		{`{"a": 1,}`, WantKey, 8},
		{`{"a" 1}`, WantColon, 5},
		{`{"a": 1 "b": 2}`, WantCommaOrBrace, 8},
		{`{"a": 1`, WantCommaOrBrace, 7},
		{`{"a": [1 2]}`, WantCommaOrBracket, 9},
		{`{"a": 1} x`, WantEnd, 9},
		{`{"a": }`, WantValue, 6},
		{`{"a": nul}`, WantLiteral, 6},
		{"{\"a\": \"\x01\"}", WantStringByte, 7},
		{`{"a": "x\q"}`, WantEscape, 9},
		{`{"a": "x\`, WantEscape, 9},
		{`{"a": "\u12"}`, WantHexDigit, 11},
		{`{"a": "open`, WantQuote, 11},
		{`{"a": -}`, WantDigit, 7},
		{`{"a": 1.e3}`, WantDigit, 8},
	} {
		err := Object([]byte(tc.in), nil, nil, 10)
		var se *SyntaxError
		if !errors.As(err, &se) || se.Want != tc.want || se.Offset != tc.offset {
			t.Errorf("Object(%q) = %#v, want Want %d at %d", tc.in, err, tc.want, tc.offset)
		}
	}
}

// BenchmarkLines reads 100,000 prediction lines for the four fields a
// writer needs. x_encoding_json is how many times faster Object is than
// encoding/json's Decoder filling a struct of the same fields from the same
// bytes, measured in the same run.
func BenchmarkLines(b *testing.B) {
	const n = 100_000
	var in bytes.Buffer
	for i := range n {
		fmt.Fprintf(&in, `{"instance_id": "item_%07d", "schema_name": "sentiment", "payload": {"label": "positive", "scores": [0.1, 0.2, 0.7]}, "confidence": 0.%d, "model": "tfidf", "text": "lorem ipsum dolor sit amet"}`+"\n", i, i%10)
	}
	data := in.Bytes()
	keys := []string{"instance_id", "schema_name", "payload", "confidence"}

	reference := func() time.Duration {
		start := time.Now()
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			var p struct {
				InstanceID string          `json:"instance_id"`
				SchemaName string          `json:"schema_name"`
				Payload    json.RawMessage `json:"payload"`
				Confidence json.RawMessage `json:"confidence"`
			}
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}

	raw := make([][]byte, len(keys))
	var elapsed time.Duration
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			if err := Object(sc.Bytes(), keys, raw, encodingJSONDepth); err != nil {
				b.Fatal(err)
			}
		}
		elapsed += time.Since(start)
	}
	b.StopTimer()
	ref := reference()
	per := elapsed / time.Duration(b.N)
	b.ReportMetric(float64(n)/per.Seconds(), "lines/s")
	b.ReportMetric(float64(n)/ref.Seconds(), "encoding_json_lines/s")
	b.ReportMetric(ref.Seconds()/per.Seconds(), "x_encoding_json")
}
