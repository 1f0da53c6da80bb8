package project

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"potato-training/lib/config"
)

// Annotator is one folder of the annotation directory that holds a
// user_state.json.
type Annotator struct {
	ID  string // user_id from user_state.json, or the folder name
	Dir string // the folder's name
}

// Span is one annotated span: characters [Start, End) of the item's text.
type Span struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	Title  string `json:"title,omitempty"`
	Start  int    `json:"start"`
	End    int    `json:"end"`
	ID     string `json:"id,omitempty"`
}

// Vote is one annotator's answer for one item and schema.
type Vote struct {
	Annotator int // index into Annotations.Annotators
	// Key is the whole value map the annotator gave, {name: value} (for a
	// span schema {"_spans": [span, ...]}), as Potato's aggregation
	// compares it: Python's json.dumps with sort_keys, so two votes agree
	// exactly when their keys are equal.
	Key string
	// Target is what the map means for training: a string (nominal), a
	// sorted []string (multilabel), a float64 (ordinal, continuous) or a
	// []Span sorted by position (span). nil when the map yields none (no
	// label chosen, two radio labels chosen, ...): such a vote still takes
	// part in the aggregation, as in Potato.
	Target any
}

// Annotations holds every annotator's targets, and nothing else of their
// user_state.json files.
type Annotations struct {
	Annotators []Annotator // sorted by folder name: "first seen" is this order
	Schemes    []config.Scheme
	// votes[item][schema] lists the votes in annotator order, those
	// without a target included.
	votes map[string]map[string][]Vote
	// active counts the annotators with at least one instance in their
	// label or span maps, of any schema: Potato's annotators, which decide
	// whether consensus has more than one to weigh.
	active int
}

// ReadAnnotations reads every annotator's user_state.json under dir. Only
// the direct sub-folders of dir that hold a user_state.json are annotators,
// so the toolkit's own training/ folder and Potato's exports/ are skipped.
// Only the schemes given are kept, and of them only those with a trainable
// kind; a label or span of any other schema is ignored. A dir that does not
// exist is an error (it wraps fs.ErrNotExist).
func ReadAnnotations(dir string, schemes []config.Scheme) (*Annotations, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("annotation directory: %w", err)
	}
	a := &Annotations{Schemes: schemes, votes: make(map[string]map[string][]Vote)}
	byName := make(map[string]config.Scheme, len(schemes))
	for _, s := range schemes {
		if _, dup := byName[s.Name]; !dup && s.Kind != config.KindOther && s.Kind != "" {
			byName[s.Name] = s
		}
	}
	// os.ReadDir sorts by name, which fixes the annotator order.
	for _, e := range entries {
		path := filepath.Join(dir, e.Name(), "user_state.json")
		if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		st, err := readUserState(path, byName)
		if err != nil {
			return nil, err
		}
		idx := len(a.Annotators)
		id := st.userID
		if id == "" {
			id = e.Name()
		}
		a.Annotators = append(a.Annotators, Annotator{ID: id, Dir: e.Name()})
		if st.instances > 0 {
			a.active++
		}
		for iid, votes := range st.votes {
			m := a.votes[iid]
			if m == nil {
				m = make(map[string][]Vote, len(votes))
				a.votes[iid] = m
			}
			for schema, v := range votes {
				v.Annotator = idx
				m[schema] = append(m[schema], v)
			}
		}
	}
	return a, nil
}

// Votes returns the votes with a target for one item and schema, in
// annotator order.
func (a *Annotations) Votes(itemID, schema string) []Vote {
	all := a.votes[itemID][schema]
	for _, v := range all {
		if v.Target == nil {
			out := make([]Vote, 0, len(all))
			for _, v := range all {
				if v.Target != nil {
					out = append(out, v)
				}
			}
			return out
		}
	}
	return all
}

// ItemIDs returns the ids of the items anyone has a target for, sorted.
func (a *Annotations) ItemIDs() []string {
	ids := make([]string, 0, len(a.votes))
	for id, m := range a.votes {
		for _, vs := range m {
			if slices.ContainsFunc(vs, func(v Vote) bool { return v.Target != nil }) {
				ids = append(ids, id)
				break
			}
		}
	}
	sort.Strings(ids)
	return ids
}

type userState struct {
	userID    string
	votes     map[string]map[string]Vote // item -> schema -> vote
	instances int                        // instances in either map, of any schema
	keys      map[string]struct{}
}

// readUserState walks one user_state.json token by token: the keys that
// matter are decoded one item at a time and every other key is skipped
// without being held, so memory follows the labels, not the file.
func readUserState(path string, schemes map[string]config.Scheme) (*userState, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReaderSize(newUTF8Reader(f), 64<<10))
	dec.UseNumber()
	st := &userState{votes: make(map[string]map[string]Vote)}
	fail := func(err error) (*userState, error) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := expectDelim(dec, '{'); err != nil {
		return fail(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		switch key, _ := tok.(string); key {
		case "user_id":
			var v any
			if err := dec.Decode(&v); err != nil {
				return fail(err)
			}
			if v != nil {
				st.userID = scalarString(v)
			}
		case "instance_id_to_label_to_value":
			err = eachInstance(dec, func(iid string, v any) {
				st.seen(iid)
				for schema, values := range foldLabels(v) {
					s, ok := schemes[schema]
					if !ok || s.Kind == config.KindSpan {
						continue
					}
					vote := Vote{Key: pyJSON(values)}
					if t, ok := labelTarget(s.Kind, values); ok {
						vote.Target = t
					}
					st.set(iid, schema, vote)
				}
			})
		case "instance_id_to_span_to_value":
			err = eachInstance(dec, func(iid string, v any) {
				st.seen(iid)
				raw := make(map[string][]any)
				for schema, spans := range foldSpans(v, raw) {
					if s, ok := schemes[schema]; ok && s.Kind == config.KindSpan {
						vote := Vote{Key: pyJSON(map[string]any{"_spans": raw[schema]})}
						if len(spans) > 0 {
							sortSpans(spans)
							vote.Target = spans
						}
						st.set(iid, schema, vote)
					}
				}
			})
		default:
			err = skipValue(dec)
		}
		if err != nil {
			return fail(err)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return fail(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the end of the JSON object")
		}
		return fail(err)
	}
	return st, nil
}

func (st *userState) set(iid, schema string, v Vote) {
	m := st.votes[iid]
	if m == nil {
		m = make(map[string]Vote, 2)
		st.votes[iid] = m
	}
	m[schema] = v
}

// seen counts an instance of either map once: Potato makes one record of
// it, whatever it holds.
func (st *userState) seen(iid string) {
	if iid == "" {
		return
	}
	if st.keys == nil {
		st.keys = make(map[string]struct{})
	}
	if _, ok := st.keys[iid]; !ok {
		st.keys[iid] = struct{}{}
		st.instances++
	}
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("expected %q, found %v", string(want), tok)
	}
	return nil
}

// eachInstance decodes an {iid: value} object one value at a time. A null
// stands for an empty object.
func eachInstance(dec *json.Decoder, fn func(iid string, v any)) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("expected an object of instances, found %v", tok)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		iid, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return err
		}
		fn(iid, v)
	}
	_, err = dec.Token()
	return err
}

// skipValue reads past one value of any size, token by token.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
				if depth > maxDepth {
					return errTooDeep
				}
			default:
				depth--
			}
		}
		if depth == 0 {
			return nil
		}
	}
}

// foldLabels turns one instance's labels into {schema: {name: value}}. The
// current encoding is a list of [{"schema": S, "name": N}, value] pairs; the
// older one is {S: {N: value}}. In the older one a bare value v in place of
// the {N: value} object stands for {v: v}, which reads as the label v (or the
// number v) being chosen.
func foldLabels(v any) map[string]map[string]any {
	out := make(map[string]map[string]any)
	put := func(schema, name string, value any) {
		m := out[schema]
		if m == nil {
			m = make(map[string]any, 1)
			out[schema] = m
		}
		m[name] = value
	}
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			pair, ok := e.([]any)
			if !ok || len(pair) != 2 {
				continue
			}
			switch lab := pair[0].(type) {
			case map[string]any:
				put(scalarString(lab["schema"]), scalarString(lab["name"]), pair[1])
			case string:
				put(lab, "", pair[1])
			}
		}
	case map[string]any:
		for schema, sv := range x {
			switch y := sv.(type) {
			case map[string]any:
				for name, value := range y {
					put(schema, name, value)
				}
			case nil:
			default:
				put(schema, scalarString(y), y)
			}
		}
	}
	return out
}

// foldSpans turns one instance's spans into {schema: spans}: the list of
// [span, value] pairs Potato writes (the value is not consulted, as in
// Potato), or an older {schema: [span, ...]} or {schema: {id: span}}. raw
// receives the span objects as they were decoded, by schema, in file order
// (for {id: span}, in id order), for the vote's key.
func foldSpans(v any, raw map[string][]any) map[string][]Span {
	out := make(map[string][]Span)
	add := func(o any) {
		if m, ok := o.(map[string]any); ok {
			s := spanOf(m)
			out[s.Schema] = append(out[s.Schema], s)
			raw[s.Schema] = append(raw[s.Schema], m)
		}
	}
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			if pair, ok := e.([]any); ok && len(pair) == 2 {
				add(pair[0])
			} else {
				add(e)
			}
		}
	case map[string]any:
		for schema, list := range x {
			var objs []any
			switch y := list.(type) {
			case []any:
				objs = y
			case map[string]any:
				for _, id := range slices.Sorted(maps.Keys(y)) {
					objs = append(objs, y[id])
				}
			default:
				continue
			}
			raw[schema] = append(raw[schema][:0:0], objs...)
			out[schema] = out[schema][:0:0]
			for _, o := range objs {
				if m, ok := o.(map[string]any); ok {
					s := spanOf(m)
					if s.Schema == "" {
						s.Schema = schema
					}
					out[schema] = append(out[schema], s)
				}
			}
		}
	}
	return out
}

func spanOf(m map[string]any) Span {
	s := Span{
		Schema: scalarString(m["schema"]),
		Name:   scalarString(m["name"]),
		Title:  scalarString(m["title"]),
		ID:     scalarString(m["id"]),
	}
	if f, ok := number(m["start"]); ok {
		s.Start = int(f)
	}
	if f, ok := number(m["end"]); ok {
		s.End = int(f)
	}
	return s
}

func sortSpans(spans []Span) {
	sort.Slice(spans, func(i, j int) bool {
		a, b := spans[i], spans[j]
		if a.Start != b.Start {
			return a.Start < b.Start
		}
		if a.End != b.End {
			return a.End < b.End
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.ID < b.ID
	})
}

// chosen is Potato's test for a selected label: any value but null, "",
// false, 0 and "false". The strings "0" and "False" are chosen, as in Potato.
func chosen(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case string:
		return x != "" && x != "false"
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case float64:
		return x != 0
	}
	return true
}

// labelTarget turns one annotator's {name: value} map for a schema into its
// target; a label without a name is never chosen. Nominal: the one chosen
// name. Multilabel: the chosen names, sorted.
// Ordinal and continuous: when the map has exactly one entry, its value as a
// number (Potato's likert stores {"3": "3"}, a slider or number field its
// value), else, when the value is chosen but not a number ("true", the name),
// the name as a number. A likert scale's point that is a word (a scale given
// labels stores the chosen label's name) is that name, as Potato's own
// training reads it; the trainers place it on the scale by the schema's
// labels. Anything else yields no target.
func labelTarget(kind config.Kind, values map[string]any) (any, bool) {
	switch kind {
	case config.KindNominal:
		// A label without a name counts as chosen, as in Potato, but is
		// no target.
		one, n := "", 0
		for name, v := range values {
			if chosen(v) {
				one, n = name, n+1
			}
		}
		return one, n == 1 && one != ""
	case config.KindMultilabel:
		var names []string
		for name, v := range values {
			if name != "" && chosen(v) {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		return names, len(names) > 0
	case config.KindOrdinal, config.KindContinuous:
		if len(values) != 1 {
			return nil, false
		}
		for name, v := range values {
			if f, ok := number(v); ok {
				return f, true
			}
			if chosen(v) {
				if f, ok := number(name); ok {
					return f, true
				}
				if kind == config.KindOrdinal && name != "" {
					return name, true
				}
			}
		}
	}
	return nil, false
}

// number reads a JSON number or a string holding a finite number.
func number(v any) (float64, bool) {
	var f float64
	var err error
	switch x := v.(type) {
	case json.Number:
		f, err = x.Float64()
	case float64:
		f = x
	case string:
		f, err = strconv.ParseFloat(strings.TrimSpace(x), 64)
	default:
		return 0, false
	}
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// scalarString renders a decoded JSON scalar as Potato's str() would for the
// common cases: a string as itself, a number as its JSON text.
func scalarString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		if x {
			return "true"
		}
		return "false"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Answers returns every annotator's answer to the item in the schema, in
// annotator order, those that yield no target included (Target nil: no
// label chosen, two radio labels chosen).
func (a *Annotations) Answers(itemID, schema string) []Vote {
	return a.votes[itemID][schema]
}
