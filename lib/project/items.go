// Package project reads a Potato project's data files and annotation output.
//
// The formats are the ones Potato writes and reads (FORMATS.md): data files
// in JSON, JSON Lines, CSV or TSV; one user_state.json per annotator under
// the output annotation directory.
package project

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"potato-training/lib/config"
	"potato-training/lib/jsonscan"
)

// Source says where a project's items and annotations are.
type Source struct {
	DataFiles     []string // absolute paths, read in this order
	IDKey         string   // item_properties.id_key; "id" when empty
	TextKey       string   // item_properties.text_key; "text" when empty
	AnnotationDir string   // absolute path of output_annotation_dir
	Schemes       []config.Scheme
	// NoDuplicateCheck turns off the set of ids seen, the one thing that
	// grows with the number of items. A caller that streams a large
	// project checks the ids it keeps (the labelled ones) itself.
	NoDuplicateCheck bool
	// RawText hands a text that is a JSON string as its JSON (Item.TextJSON),
	// undecoded, when a JSON writer may copy it as it is (see
	// verbatimJSON); Item.Text is then empty. A caller that writes the
	// text out again saves decoding and encoding it.
	RawText bool
}

// Item is one entry of a data file, reduced to what training needs.
type Item struct {
	ID   string // the id_key value as a string: the JSON number 7 is "7"
	Text string // the text_key value; "" when the item has none
	// TextJSON is, with Source.RawText, the text as the data file has it,
	// a JSON string, quotes included, that decodes to the text; Text is
	// then "". It is only valid during the call that is given the item.
	TextJSON []byte
	// Fields holds the value of each scheme's SourceField the item has. It is
	// nil when no scheme names a source field.
	Fields map[string]string
}

// EachItem calls fn with every item of every data file, in file order. A
// file is read as a stream, so memory does not grow with its size; only the
// set of ids seen grows, to detect duplicates (unless NoDuplicateCheck is
// set). An item without an id, a
// duplicate id, invalid JSON or CSV, an unreadable file or an unknown
// extension stops the walk with an error naming the file and the line where
// the item starts. An error returned by fn stops the walk and is returned
// as is.
func EachItem(src Source, fn func(Item) error) error {
	r := itemReader{
		idKey:   src.IDKey,
		textKey: src.TextKey,
		rawText: src.RawText,
		fn:      fn,
	}
	if !src.NoDuplicateCheck {
		r.seen = make(map[string]struct{})
	}
	if r.idKey == "" {
		r.idKey = "id"
	}
	if r.textKey == "" {
		r.textKey = "text"
	}
	for _, s := range src.Schemes {
		if s.SourceField != "" && !containsString(r.fields, s.SourceField) {
			r.fields = append(r.fields, s.SourceField)
		}
	}
	for _, path := range src.DataFiles {
		if err := r.readFile(path); err != nil {
			return err
		}
	}
	return nil
}

// errStop carries an error from fn through the readers untouched.
type errStop struct{ err error }

func (e errStop) Error() string { return e.err.Error() }

type itemReader struct {
	idKey, textKey string
	rawText        bool
	fields         []string
	seen           map[string]struct{}
	fn             func(Item) error
}

func (r *itemReader) readFile(path string) error {
	ext := strings.ToLower(filepath.Ext(path))
	switch ext {
	case ".json", ".jsonl", ".csv", ".tsv":
	default:
		return fmt.Errorf("data file %s: unknown extension %q (want .json, .jsonl, .csv or .tsv)", path, ext)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("data file: %w", err)
	}
	defer f.Close()
	switch ext {
	case ".csv":
		err = r.readCSV(path, f, ',')
	case ".tsv":
		err = r.readCSV(path, f, '\t')
	default:
		err = r.readJSON(path, f, ext == ".json")
	}
	var stop errStop
	if errors.As(err, &stop) {
		return stop.err
	}
	return err
}

// emit checks an item's id and hands it to fn. line is where the item
// starts, for an error.
func (r *itemReader) emit(path string, line int, it Item, hasID bool) error {
	if !hasID || it.ID == "" {
		return fmt.Errorf("%s: line %d: item has no %q field", path, line, r.idKey)
	}
	// One hash per item: the set grows unless the id was already in it.
	if r.seen != nil {
		n := len(r.seen)
		r.seen[it.ID] = struct{}{}
		if len(r.seen) == n {
			return fmt.Errorf("%s: line %d: duplicate item id %q", path, line, it.ID)
		}
	}
	if err := r.fn(it); err != nil {
		return errStop{err}
	}
	return nil
}

// readJSON reads a JSON array of objects, or a stream of objects (one a
// line, as Potato writes them; an object may also span lines). In a .json
// file the first byte that is not white space tells which: '[' is an array.
func (r *itemReader) readJSON(path string, f io.Reader, mayBeArray bool) error {
	keys := append([]string{r.idKey, r.textKey}, r.fields...)
	d := newObjDecoder(r, path, keys)
	defer d.close()
	err := r.cutJSON(path, f, mayBeArray, d)
	// The items before the place of an error come first, as they would
	// from one goroutine; so does an error of theirs.
	if ferr := d.flush(); ferr != nil {
		return ferr
	}
	return err
}

// cutJSON cuts the objects of a data file (see readJSON) and hands each to
// d, with the line it starts on.
func (r *itemReader) cutJSON(path string, f io.Reader, mayBeArray bool, d *objDecoder) error {
	s := newJSONStream(f)
	fail := func(line int, format string, args ...any) error {
		return fmt.Errorf("%s: line %d: %s", path, line, fmt.Sprintf(format, args...))
	}
	c, ok := s.peek()
	if !ok {
		if s.err != io.EOF {
			return fmt.Errorf("data file %s: %w", path, s.err)
		}
		return nil
	}
	array := mayBeArray && c == '['
	if array {
		s.pos++
	}
	for n := 0; ; n++ {
		c, ok = s.peek()
		if array {
			if ok && c == ']' && n == 0 {
				s.pos++
				break
			}
			if ok && n > 0 {
				if c == ']' {
					s.pos++
					break
				}
				if c != ',' {
					return fail(s.line, "invalid JSON: expected ',' or ']' after an array element, found %q", c)
				}
				s.pos++
				c, ok = s.peek()
			}
			if !ok {
				return fail(s.line, "invalid JSON: %v", s.readErr())
			}
		} else if !ok {
			break
		}
		line := s.line
		if c != '{' {
			if strings.IndexByte("[\"-0123456789tfn", c) >= 0 {
				return fail(line, "item is not a JSON object")
			}
			return fail(line, "invalid JSON: invalid character %q", c)
		}
		obj, err := s.cut()
		if err != nil {
			return fail(line, "invalid JSON: %v", err)
		}
		if err := d.add(obj, line); err != nil {
			return err
		}
	}
	if array {
		if c, ok := s.peek(); ok {
			return fail(s.line, "data after the end of the JSON array, starting %q", c)
		}
	}
	if s.err != io.EOF {
		return fmt.Errorf("data file %s: %w", path, s.err)
	}
	return nil
}

// TextValue is the item's text, decoded from TextJSON when it has that.
func (it Item) TextValue() string {
	if it.TextJSON != nil {
		s, _ := jsonString(it.TextJSON)
		return s
	}
	return it.Text
}

// verbatimJSON says whether raw, a JSON string the scanner has checked,
// decodes to the same text after encoding/json writes it again: valid
// UTF-8 (the encoder writes U+FFFD for a bad byte) with no \u escape of a
// lone surrogate (the decoder gives U+FFFD for one).
func verbatimJSON(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || !utf8.Valid(raw) {
		return false
	}
	for i := bytes.IndexByte(raw, '\\'); i >= 0; {
		if i+1 < len(raw) && raw[i+1] == 'u' && i+5 < len(raw) {
			if c := raw[i+2] | 0x20; c == 'd' && strings.IndexByte("89abcdefABCDEF", raw[i+3]) >= 0 {
				return false
			}
		}
		// Past the escape: "\\" is one, whose second backslash escapes
		// nothing.
		j := bytes.IndexByte(raw[i+2:], '\\')
		if j < 0 {
			break
		}
		i += 2 + j
	}
	return true
}

// jsonString turns a JSON value into the string Potato compares: a string's
// contents, or the JSON text of any other value (the number 7 is "7"). Null
// and absent values have none.
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false
	}
	if raw[0] != '"' {
		return string(raw), true
	}
	if s, ok := jsonscan.String(raw); ok {
		return s, true
	}
	return string(raw), true
}

// readCSV reads a CSV or TSV file whose first row names the fields.
func (r *itemReader) readCSV(path string, f io.Reader, comma rune) error {
	cr := csv.NewReader(bufio.NewReaderSize(f, 256<<10))
	cr.Comma = comma
	cr.LazyQuotes = comma == '\t'
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff")
	}
	col := func(name string) int {
		for i, h := range header {
			if h == name {
				return i
			}
		}
		return -1
	}
	idCol, textCol := col(r.idKey), col(r.textKey)
	if idCol < 0 {
		return fmt.Errorf("%s: line 1: the header has no %q column", path, r.idKey)
	}
	fieldCols := make([]int, len(r.fields))
	for i, k := range r.fields {
		fieldCols[i] = col(k)
	}
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		get := func(i int) (string, bool) {
			if i < 0 || i >= len(rec) {
				return "", false
			}
			return rec[i], true
		}
		var it Item
		var hasID bool
		it.ID, hasID = get(idCol)
		// The id outlives the row in the duplicate set; a copy keeps the
		// set from holding every row's text alive.
		it.ID = strings.Clone(it.ID)
		it.Text, _ = get(textCol)
		if len(r.fields) > 0 {
			it.Fields = make(map[string]string, len(r.fields))
			for i, k := range r.fields {
				if v, ok := get(fieldCols[i]); ok {
					it.Fields[k] = v
				}
			}
		}
		line, _ := cr.FieldPos(0)
		if err := r.emit(path, line, it, hasID); err != nil {
			return err
		}
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
