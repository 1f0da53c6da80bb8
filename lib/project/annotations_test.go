package project

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"potato-training/lib/config"
)

func scheme(name, annotationType string, labels ...string) config.Scheme {
	return config.Scheme{Name: name, AnnotationType: annotationType, Kind: config.KindOf(annotationType), Labels: labels}
}

var testSchemes = []config.Scheme{
	scheme("sentiment", "radio", "positive", "negative", "neutral"),
	scheme("aspects", "multiselect", "acting", "plot", "visuals", "music"),
	scheme("rating", "likert"),
	scheme("score", "slider"),
	scheme("toxic", "span", "insult", "threat"),
	scheme("comment", "text"),
}

func readTestAnnotations(t *testing.T) *Annotations {
	t.Helper()
	a, err := ReadAnnotations(abs(t, "testdata/annotations"), testSchemes)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// targetsOf returns one annotator's targets for an item, by schema.
func targetsOf(a *Annotations, annotator int, item string) map[string]any {
	out := map[string]any{}
	for _, s := range a.Schemes {
		for _, v := range a.Votes(item, s.Name) {
			if v.Annotator == annotator {
				out[s.Name] = v.Target
			}
		}
	}
	return out
}

func TestReadAnnotationsSkipsNonAnnotators(t *testing.T) {
	a := readTestAnnotations(t)
	// training/ and exports/ and notes/ hold no user_state.json of their
	// own (training/runs/... does, one level too deep), and the top-level
	// user_state.json is a file, not a folder.
	want := []Annotator{{ID: "alice", Dir: "ann_a"}, {ID: "ann_b", Dir: "ann_b"}}
	if !reflect.DeepEqual(a.Annotators, want) {
		t.Errorf("annotators = %+v, want %+v", a.Annotators, want)
	}
}

func TestReadAnnotationsPairEncoding(t *testing.T) {
	a := readTestAnnotations(t)
	for _, tc := range []struct {
		item string
		want map[string]any
	}{
		// "true" chosen, "false" not; likert {"4": "4"}; slider value "73.5".
		{"i1", map[string]any{
			"sentiment": "positive",
			"aspects":   []string{"acting", "plot"},
			"rating":    4.0,
			"score":     73.5,
		}},
		// null, 0, false and "" are not chosen; the label's own name is;
		// likert {"5": "true"} reads the name; a slider at 0 is the number 0.
		{"i2", map[string]any{
			"sentiment": "negative",
			"rating":    5.0,
			"score":     0.0,
		}},
		// Two radio labels chosen: no target. Spans of toxic only, sorted.
		{"i3", map[string]any{
			"toxic": []Span{
				{Schema: "toxic", Name: "threat", Title: "Threat", Start: 0, End: 4, ID: "s1"},
				{Schema: "toxic", Name: "insult", Title: "Insult", Start: 10, End: 15, ID: "s2"},
			},
		}},
		// The number 1 is chosen; a likert map with two entries has no target.
		{"i4", map[string]any{"sentiment": "neutral"}},
		// "false" is not chosen; a text schema yields nothing.
		{"i5", map[string]any{}},
	} {
		if got := targetsOf(a, 0, tc.item); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("alice %s:\n got %#v\nwant %#v", tc.item, got, tc.want)
		}
	}
}

func TestReadAnnotationsOlderEncoding(t *testing.T) {
	a := readTestAnnotations(t)
	for _, tc := range []struct {
		item string
		want map[string]any
	}{
		{"i1", map[string]any{
			"sentiment": "positive",
			"aspects":   []string{"acting", "plot"}, // true and the name are chosen
			"rating":    4.0,                        // the JSON number 4
		}},
		{"i2", map[string]any{"sentiment": "neutral"}}, // a bare value names the label
		{"i3", map[string]any{
			"sentiment": "negative", // the string "0" is chosen, as in Potato
			"toxic":     []Span{{Schema: "toxic", Name: "insult", Title: "Insult", Start: 10, End: 15}},
		}},
	} {
		if got := targetsOf(a, 1, tc.item); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ann_b %s:\n got %#v\nwant %#v", tc.item, got, tc.want)
		}
	}
	if ids := a.ItemIDs(); !reflect.DeepEqual(ids, []string{"i1", "i2", "i3", "i4"}) {
		t.Errorf("item ids = %q", ids)
	}
}

func TestChosen(t *testing.T) {
	for _, tc := range []struct {
		json string
		want bool
	}{
		{`null`, false}, {`""`, false}, {`false`, false}, {`0`, false}, {`0.0`, false}, {`"false"`, false},
		{`"true"`, true}, {`"positive"`, true}, {`true`, true}, {`1`, true}, {`"0"`, true},
		{`"False"`, true}, {`-2.5`, true}, {`{}`, true}, {`[]`, true},
	} {
		dec := json.NewDecoder(strings.NewReader(tc.json))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if got := chosen(v); got != tc.want {
			t.Errorf("chosen(%s) = %v, want %v", tc.json, got, tc.want)
		}
	}
}

func TestLabelTargets(t *testing.T) {
	num := func(s string) json.Number { return json.Number(s) }
	for _, tc := range []struct {
		kind   config.Kind
		values map[string]any
		want   any
		ok     bool
	}{
		{config.KindNominal, map[string]any{"a": "true"}, "a", true},
		{config.KindNominal, map[string]any{"a": "a", "b": nil}, "a", true},
		{config.KindNominal, map[string]any{"a": "true", "b": "b"}, nil, false},
		{config.KindNominal, map[string]any{"a": "false", "b": ""}, nil, false},
		{config.KindNominal, map[string]any{"": "true"}, nil, false},
		{config.KindMultilabel, map[string]any{"z": "true", "b": true, "m": "m", "x": num("0")}, []string{"b", "m", "z"}, true},
		{config.KindMultilabel, map[string]any{"x": false}, nil, false},
		{config.KindOrdinal, map[string]any{"3": "3"}, 3.0, true},
		{config.KindOrdinal, map[string]any{"3": "true"}, 3.0, true},
		// A likert scale given labels stores the chosen label's name: the
		// target is that name, placed on the scale by the trainers.
		{config.KindOrdinal, map[string]any{"very good": "true"}, "very good", true},
		{config.KindOrdinal, map[string]any{"very good": "very good"}, "very good", true},
		{config.KindContinuous, map[string]any{"very good": "true"}, nil, false},
		{config.KindOrdinal, map[string]any{"3": nil}, nil, false},
		{config.KindOrdinal, map[string]any{"2": "2", "3": "3"}, nil, false},
		{config.KindContinuous, map[string]any{"slider": num("-1.5e2")}, -150.0, true},
		{config.KindContinuous, map[string]any{"slider": " 42 "}, 42.0, true},
		{config.KindContinuous, map[string]any{"slider": "NaN"}, nil, false},
		{config.KindContinuous, map[string]any{"slider": num("0")}, 0.0, true},
	} {
		got, ok := labelTarget(tc.kind, tc.values)
		if ok != tc.ok || ok && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("labelTarget(%s, %v) = %#v, %v; want %#v, %v", tc.kind, tc.values, got, ok, tc.want, tc.ok)
		}
	}
}

const examples = "../../testdata/potato-examples/advanced/"

func TestReadAnnotationsRealDatasetPublishing(t *testing.T) {
	schemes := []config.Scheme{
		scheme("sentiment", "radio", "positive", "negative", "neutral"),
		scheme("aspects", "multiselect", "acting", "plot", "visuals", "music"),
	}
	a, err := ReadAnnotations(abs(t, examples+"dataset-publishing/seed_annotations"), schemes)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Annotator{{ID: "alice", Dir: "alice"}, {ID: "bob", Dir: "bob"}}; !reflect.DeepEqual(a.Annotators, want) {
		t.Fatalf("annotators = %+v", a.Annotators)
	}
	for _, tc := range []struct {
		annotator  int
		item       string
		sentiment  string
		aspects    []string
		hasAspects bool
	}{
		{0, "r1", "positive", []string{"acting", "plot"}, true},
		{0, "r3", "neutral", []string{"music", "visuals"}, true},
		{0, "r4", "positive", nil, false},
		{1, "r1", "positive", []string{"acting"}, true},
		{1, "r3", "positive", []string{"visuals"}, true},
		{1, "r5", "neutral", nil, false},
	} {
		got := targetsOf(a, tc.annotator, tc.item)
		if got["sentiment"] != tc.sentiment {
			t.Errorf("%s %s sentiment = %v, want %s", a.Annotators[tc.annotator].ID, tc.item, got["sentiment"], tc.sentiment)
		}
		if asp, ok := got["aspects"]; ok != tc.hasAspects || ok && !reflect.DeepEqual(asp, tc.aspects) {
			t.Errorf("%s %s aspects = %v, want %v", a.Annotators[tc.annotator].ID, tc.item, asp, tc.aspects)
		}
	}
	if ids := a.ItemIDs(); len(ids) != 6 {
		t.Errorf("items = %q, want r1..r6", ids)
	}
}

func TestReadAnnotationsRealSoloMode(t *testing.T) {
	a, err := ReadAnnotations(abs(t, examples+"solo-mode/annotations"),
		[]config.Scheme{scheme("sentiment", "radio", "positive", "negative", "neutral")})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, an := range a.Annotators {
		ids = append(ids, an.ID)
	}
	if want := []string{"lina", "lina1", "lina2", "linaiyer"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("annotators = %q, want %q", ids, want)
	}
	// lina stores the label's name as its value, linaiyer a key ("1").
	for _, tc := range []struct {
		annotator  int
		item, want string
	}{
		{0, "3", "neutral"}, {0, "8", "negative"},
		{2, "3", "negative"},
		{3, "1", "positive"}, {3, "9", "neutral"}, {3, "20", "negative"},
	} {
		if got := targetsOf(a, tc.annotator, tc.item)["sentiment"]; got != tc.want {
			t.Errorf("%s item %s = %v, want %s", ids[tc.annotator], tc.item, got, tc.want)
		}
	}
	if v := a.Votes("4", "sentiment"); len(v) != 4 {
		t.Errorf("item 4 has %d votes, want one from each annotator", len(v))
	}
}

func TestReadAnnotationsErrors(t *testing.T) {
	if _, err := ReadAnnotations(filepath.Join(t.TempDir(), "absent"), testSchemes); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("absent dir: err = %v, want fs.ErrNotExist", err)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "carol"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "carol", "user_state.json")
	if err := os.WriteFile(bad, []byte(`{"user_id": "carol", "instance_id_to_label_to_value": {"x": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAnnotations(dir, testSchemes); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("truncated user_state.json: err = %v, want one naming %s", err, bad)
	}
}

func TestReadAnnotationsEmptyState(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "dave"), 0o755)
	os.WriteFile(filepath.Join(dir, "dave", "user_state.json"),
		[]byte(`{"user_id": null, "instance_id_to_label_to_value": null, "instance_id_to_span_to_value": {}}`), 0o644)
	a, err := ReadAnnotations(dir, testSchemes)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Annotators) != 1 || a.Annotators[0].ID != "dave" || len(a.ItemIDs()) != 0 {
		t.Errorf("got %+v with items %q", a.Annotators, a.ItemIDs())
	}
}

// TestReadAnnotationsSkipsLargeKeys checks that the labels and user id are
// found around a large key of the kind Potato fills with interaction logs.
func TestReadAnnotationsSkipsLargeKeys(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "erin"), 0o755)
	var b strings.Builder
	b.WriteString(`{"instance_id_to_behavioral_data": {`)
	for i := range 20000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"x` + strings.Repeat("y", 10) + string(rune('a'+i%26)) + `": {"events": [1, 2, {"k": "v"}], "t": "` + strings.Repeat("z", 100) + `"}`)
	}
	b.WriteString(`}, "instance_id_to_label_to_value": {"i1": [[{"schema": "sentiment", "name": "neutral"}, "true"]]}, "user_id": "erin"}`)
	os.WriteFile(filepath.Join(dir, "erin", "user_state.json"), []byte(b.String()), 0o644)
	a, err := ReadAnnotations(dir, testSchemes)
	if err != nil {
		t.Fatal(err)
	}
	if got := targetsOf(a, 0, "i1"); got["sentiment"] != "neutral" || a.Annotators[0].ID != "erin" {
		t.Errorf("got %v for %+v", got, a.Annotators)
	}
}
