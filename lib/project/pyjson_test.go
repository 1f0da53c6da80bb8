package project

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPyJSON checks the keys against what Python 3's
// json.dumps(json.loads(in), sort_keys=True, ensure_ascii=False) prints.
func TestPyJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"positive": "true"}`, `{"positive": "true"}`},
		{`{"b":1,"a":true,"c":null}`, `{"a": true, "b": 1, "c": null}`},
		{`{"x": 1.0}`, `{"x": 1.0}`},
		{`{"x": 1e2}`, `{"x": 100.0}`},
		{`{"x": -0}`, `{"x": 0}`},
		{`{"x": 0.0001}`, `{"x": 0.0001}`},
		{`{"x": 0.00001}`, `{"x": 1e-05}`},
		{`{"x": 1e16}`, `{"x": 1e+16}`},
		{`{"x": 123456789012345.6}`, `{"x": 123456789012345.6}`},
		{`{"x": 73.50}`, `{"x": 73.5}`},
		{`{"x": -2.5E-3}`, `{"x": -0.0025}`},
		{`{"x": 1e400}`, `{"x": Infinity}`},
		{`{"é": "ü\n\"\\\u0001<>&\u2028"}`, "{\"é\": \"ü\\n\\\"\\\\\\u0001<>&\u2028\"}"},
		{`{"_spans": [{"start": 0, "end": 4, "name": "threat"}]}`, `{"_spans": [{"end": 4, "name": "threat", "start": 0}]}`},
		{`{"a": {}, "b": []}`, `{"a": {}, "b": []}`},
	} {
		dec := json.NewDecoder(strings.NewReader(tc.in))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got := pyJSON(v); got != tc.want {
			t.Errorf("pyJSON(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := pyJSON(map[string]any{"_spans": []any(nil)}); got != `{"_spans": []}` {
		t.Errorf("no spans = %s", got)
	}
}
