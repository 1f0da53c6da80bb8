package project

import (
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// jsonItems reads content with readJSON twice, once as a file reads and once
// a byte at a time (so that every value and escape straddles a refill), and
// checks both reads agree.
func jsonItems(t *testing.T, content string, mayBeArray bool) ([]Item, error) {
	t.Helper()
	read := func(in io.Reader) ([]Item, error) {
		var got []Item
		r := &itemReader{idKey: "id", textKey: "text", fields: []string{"image"}, seen: map[string]struct{}{},
			fn: func(it Item) error { got = append(got, it); return nil }}
		return got, r.readJSON("f.json", in, mayBeArray)
	}
	got, err := read(strings.NewReader(content))
	slow, slowErr := read(iotest.OneByteReader(strings.NewReader(content)))
	if !reflect.DeepEqual(got, slow) || (err == nil) != (slowErr == nil) || err != nil && err.Error() != slowErr.Error() {
		t.Errorf("a byte at a time: %v, %v; at once: %v, %v", slow, slowErr, got, err)
	}
	return got, err
}

func TestReadJSONValues(t *testing.T) {
	long := strings.Repeat("é", 200_000) // longer than the read buffer
	for _, tc := range []struct {
		name, in string
		array    bool
		want     []Item
	}{
		{"escaped key", `{"i\u0064": "x", "te\"xt": "no", "text": "yes"}`, false,
			[]Item{{ID: "x", Text: "yes", Fields: map[string]string{}}}},
		{"last duplicate key wins", `{"id": "x", "text": "a", "text": "b"}`, false,
			[]Item{{ID: "x", Text: "b", Fields: map[string]string{}}}},
		{"brackets and quotes in strings", `{"id": "{[\"]}", "text": "a } b \\", "image": "]"}`, false,
			[]Item{{ID: `{["]}`, Text: `a } b \`, Fields: map[string]string{"image": "]"}}}},
		{"nested values skipped", `{"meta": {"a": [1, {"b": null}], "c": -0.5e+3}, "id": 1e2, "text": true}`, false,
			[]Item{{ID: "1e2", Text: "true", Fields: map[string]string{}}}},
		{"escapes decoded", `{"id": "\u00e9\n\t\/", "text": "\ud83d\ude00"}`, false,
			[]Item{{ID: "é\n\t/", Text: "😀", Fields: map[string]string{}}}},
		{"several on a line", `{"id": 1}{"id": 2} {"id": 3}`, false,
			[]Item{{ID: "1", Fields: map[string]string{}}, {ID: "2", Fields: map[string]string{}}, {ID: "3", Fields: map[string]string{}}}},
		{"bom", "\ufeff{\"id\": 1}\n", false,
			[]Item{{ID: "1", Fields: map[string]string{}}}},
		{"bom array", "\ufeff [{\"id\": 1}]", true,
			[]Item{{ID: "1", Fields: map[string]string{}}}},
		{"long value", `[{"id": "big", "text": "` + long + `"}]`, true,
			[]Item{{ID: "big", Text: long, Fields: map[string]string{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := jsonItems(t, tc.in, tc.array)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				if len(got) == 1 && len(got[0].Text) > 100 {
					got[0].Text = got[0].Text[:100] + "..."
				}
				t.Errorf("got %q, want %d items", got, len(tc.want))
			}
		})
	}
}

func TestReadJSONErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		array    bool
		want     string
	}{
		{"newline in a string", "{\"id\": 1}\n{\"id\": 2,\n \"text\": \"a\nb\"}", false, "line 3: invalid JSON: control character"},
		{"bad escape", `{"id": "a\x"}`, false, "line 1: invalid JSON: invalid escape"},
		{"short unicode escape", `{"id": "\u12"}`, false, `invalid \u escape`},
		{"leading zero", `{"id": 01}`, false, "expected ',' or '}'"},
		{"bare minus", `{"id": -}`, false, "invalid number"},
		{"trailing comma in object", `{"id": 1,}`, false, "expected a string"},
		{"trailing comma in array", "[{\"id\": 1},\n]", true, "line 2: invalid JSON: invalid character ']'"},
		{"missing comma in array", `[{"id": 1} {"id": 2}]`, true, "expected ',' or ']'"},
		{"unquoted key", `{id: 1}`, false, "expected a string"},
		{"bad literal", `{"id": 1, "x": nul}`, false, "invalid literal"},
		{"mismatched bracket", "{\"id\": [1}\n{\"id\": 2}", false, "line 1: invalid JSON: expected ',' or ']'"},
		{"unterminated string", "{\"id\": \"a}\n{\"id\": 2}\n", false, "line 1: invalid JSON: control character"},
		{"escaped newline", "{\"id\": \"a\\\n}\n{\"id\": 2}\n", false, "line 1: invalid JSON: invalid escape"},
		{"unterminated string after an escape", "{\"id\": \"a\\\"}\n{\"id\": 2}\n", false, "line 1: invalid JSON: control character"},
		{"garbage", "{\"id\": 1}\n\nxyz", false, "line 3: invalid JSON: invalid character 'x'"},
		{"truncated", `{"id": "abc`, false, "unexpected EOF"},
		{"truncated array", `[{"id": 1}`, true, "unexpected EOF"},
		{"after the array", "[{\"id\": 1}]\n{\"id\": 2}", true, "line 2: data after the end of the JSON array"},
		{"number item", "[{\"id\": 1}, 2]", true, "item is not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := jsonItems(t, tc.in, tc.array)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestCutStopsEarly checks that a bad value is cut short at its first line
// break inside a string, or at its first mismatched bracket, rather than
// read on through the rest of the input.
func TestCutStopsEarly(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{\"id\": \"a}\n{\"id\": 2}\n", "{\"id\": \"a}\n"},
		{"{\"id\": \"a\\\"}\n{\"id\": 2}\n", "{\"id\": \"a\\\"}\n"},
		{"{\"id\": \"a\\\n}\n{\"id\": 2}\n", "{\"id\": \"a\\\n"},
		{"{\"id\": [1}\n{\"id\": 2}\n", "{\"id\": [1}"},
		{"{\"id\": {\"a\": [}]}}\n", "{\"id\": {\"a\": [}"},
		{"{\"a\": \"x\\\\\", \"b\": [\"]\"]}\n{}", "{\"a\": \"x\\\\\", \"b\": [\"]\"]}"},
	} {
		s := newJSONStream(iotest.HalfReader(strings.NewReader(tc.in)))
		if c, ok := s.peek(); !ok || c != '{' {
			t.Fatalf("%q: peek = %q, %v", tc.in, c, ok)
		}
		got, err := s.cut()
		if err != nil || string(got) != tc.want {
			t.Errorf("cut(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
