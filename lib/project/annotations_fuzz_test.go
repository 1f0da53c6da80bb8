package project

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"potato-training/lib/config"
)

var pyNonFinite = strings.NewReplacer("-Infinity", "0", "Infinity", "0", "NaN", "0")

// FuzzReadUserState reads arbitrary bytes as an annotator's
// user_state.json. It must not panic; an error names the file; a file it
// accepts is one JSON object in UTF-8 (as Potato's json.load would need),
// and every vote it keeps is of a trainable scheme given, with a key that
// is JSON as Python writes it and a target of the scheme's kind.
func FuzzReadUserState(f *testing.F) {
	for _, p := range []string{"testdata/mixed/*/user_state.json", "testdata/annotations/*/user_state.json"} {
		files, _ := filepath.Glob(p)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	for _, s := range []string{
		`{}`, `{"user_id": null}`, `{"user_id": 7, "instance_id_to_label_to_value": null}`,
		`{"instance_id_to_label_to_value": {"i1": {"sentiment": {"positive": true}}, "i2": {"rating": 3}}}`,
		`{"instance_id_to_label_to_value": {"i1": [["sentiment", "positive"], [{"schema": "aspects", "name": "plot"}, "true"]]}}`,
		`{"instance_id_to_span_to_value": {"i1": [[{"schema": "toxic", "name": "insult", "start": 0, "end": 4}, "x"]]}}`,
		`{"instance_id_to_span_to_value": {"i1": {"toxic": {"b": {"name": "threat", "start": 9, "end": 2}}}}}`,
		`{"instance_id_to_label_to_value": {"i1": {"score": {"score": 1e999}}}}`,
		`{"other": [[[[{"a": [1, 2, {"b": null}]}]]]], "user_id": "u"}`,
		`{"user_id": "u"} {"user_id": "v"}`, `{"user_id": "caf` + "\xe9" + `"}`, "\ufeff{}",
		`{"instance_id_to_label_to_value": [1, 2]}`, `[]`, `{"a":`, `{"a" 1}`,
		`{"other": ` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`,
	} {
		f.Add([]byte(s))
	}
	byName := map[string]config.Scheme{}
	for _, s := range testSchemes {
		if s.Kind != config.KindOther {
			byName[s.Name] = s
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "user_state.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := readUserState(path, byName)
		if err != nil {
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Fatalf("%q: error %q does not name the file", b, err)
			}
			return
		}
		if !utf8.Valid(b) {
			t.Fatalf("%q: accepted, but it is not UTF-8", b)
		}
		if !json.Valid(b) || !bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{")) {
			t.Fatalf("%q: accepted, but it is not one JSON object", b)
		}
		for _, vote := range st.votes {
			for _, v := range vote {
				if x, ok := v.Target.(float64); ok && (math.IsInf(x, 0) || math.IsNaN(x)) {
					t.Fatalf("%q: a target of %v", b, x)
				}
			}
		}
		for iid, votes := range st.votes {
			for schema, vote := range votes {
				s, ok := byName[schema]
				if !ok {
					t.Fatalf("%q: item %q has a vote for scheme %q, not one given", b, iid, schema)
				}
				// Python's json.dumps, which the key follows, writes
				// Infinity for a number too large for a float.
				if !json.Valid([]byte(pyNonFinite.Replace(vote.Key))) {
					t.Fatalf("%q: item %q, %s: key %q is not JSON", b, iid, schema, vote.Key)
				}
				if vote.Target == nil {
					continue
				}
				var kindOK bool
				switch vote.Target.(type) {
				case string:
					kindOK = s.Kind == config.KindNominal
				case []string:
					kindOK = s.Kind == config.KindMultilabel
				case float64:
					kindOK = s.Kind == config.KindOrdinal || s.Kind == config.KindContinuous
				case []Span:
					kindOK = s.Kind == config.KindSpan
				}
				if !kindOK {
					t.Fatalf("%q: item %q, %s (%s): target %#v", b, iid, schema, s.Kind, vote.Target)
				}
			}
		}
	})
}
