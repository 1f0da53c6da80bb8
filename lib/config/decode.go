package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// decoder fills a Config from nodes and collects problems.
type decoder struct {
	c *Config
}

func (d *decoder) errorf(line int, key, format string, args ...any) {
	d.c.Problems = append(d.c.Problems, Problem{Line: line, Key: key, Message: fmt.Sprintf(format, args...)})
}

func (d *decoder) backendErrorf(b *Backend, line int, key, format string, args ...any) {
	d.errorf(line, key, format, args...)
	d.c.Problems[len(d.c.Problems)-1].Backend = b.Name
}

// checkKeys reports keys of m absent from table and duplicated keys, and
// returns each accepted key's value node and line.
func (d *decoder) checkKeys(m *yaml.Node, path string, table []Key, typ, backend string) (map[string]*yaml.Node, map[string]int) {
	vals := map[string]*yaml.Node{}
	lines := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], deref(m.Content[i+1])
		name := k.Value
		full := path + "." + name
		if prev, dup := lines[name]; dup {
			d.errorf(k.Line, full, "%s is given twice (first on line %d)", full, prev)
			d.tag(backend)
			continue
		}
		if _, ok := findKey(table, name); !ok {
			if why, refused := notAccepted(typ, name); refused {
				d.errorf(k.Line, full, "%s: %s is not accepted on %s backend: %s", path, name, article(typ), why)
			} else if typ != "" {
				d.errorf(k.Line, full, "%s: unknown key %q for %s backend%s", path, name, article(typ), suggest(name, table))
			} else {
				d.errorf(k.Line, full, "%s: unknown key %q%s", path, name, suggest(name, table))
			}
			d.tag(backend)
			lines[name] = k.Line
			continue
		}
		vals[name] = v
		lines[name] = k.Line
	}
	return vals, lines
}

// article puts "a" or "an" before a backend type, as it is read aloud.
func article(typ string) string {
	if t, ok := backendType(typ); ok {
		return t.Article + " " + typ
	}
	return "a " + typ
}

// notAccepted is why a type refuses a key on purpose, if it does.
func notAccepted(typ, key string) (string, bool) {
	t, _ := backendType(typ)
	why, ok := t.NotAccepted[key]
	return why, ok
}

// tag marks the last problem as concerning backend.
func (d *decoder) tag(backend string) {
	if backend != "" {
		d.c.Problems[len(d.c.Problems)-1].Backend = backend
	}
}

// suggest offers the closest accepted key for a misspelt one.
func suggest(name string, table []Key) string {
	best, bestD := "", 3
	for _, k := range table {
		if dist := editDistance(name, k.Name); dist < bestD || (dist == bestD && best == "") {
			if dist <= 2 || (dist <= 3 && len(name) > 8) {
				best, bestD = k.Name, dist
			}
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Damerau-Levenshtein distance (adjacent swaps count
// once), so "pyhton" is one edit from "python".
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// fill decodes the accepted keys into the tagged fields of target (a
// pointer to a struct), applying the table's defaults for absent keys.
func (d *decoder) fill(target any, path string, table []Key, vals map[string]*yaml.Node, lines map[string]int, backend string) {
	rv := reflect.ValueOf(target).Elem()
	fields := map[string]reflect.Value{}
	for i := 0; i < rv.NumField(); i++ {
		if tag := rv.Type().Field(i).Tag.Get("key"); tag != "" {
			fields[tag] = rv.Field(i)
		}
	}
	for _, k := range table {
		f, ok := fields[k.Name]
		if !ok {
			continue // a map decoded on its own (backends, splits, ...)
		}
		v, present := vals[k.Name]
		if !present || (v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
			if k.Default != "" {
				def := &yaml.Node{Kind: yaml.ScalarNode, Value: k.Default}
				def.Tag = def.ShortTag()
				if err := decodeValue(f, def); err != nil {
					panic("config: bad default for " + k.Name + ": " + err.Error())
				}
			}
			continue
		}
		if err := decodeValue(f, v); err != nil {
			d.errorf(lines[k.Name], path+"."+k.Name, "%s.%s: %v", path, k.Name, err)
			d.tag(backend)
		}
	}
}

// required reports required keys that are absent.
func (d *decoder) required(path string, table []Key, vals map[string]*yaml.Node, line int, typ, backend string) {
	for _, k := range table {
		if !k.Required || k.Name == "type" {
			continue
		}
		if v, ok := vals[k.Name]; !ok || scalarString(v) == "" && v.Kind == yaml.ScalarNode {
			d.errorf(line, path+"."+k.Name, "%s has no %s: %s backend needs one", path, k.Name, article(typ))
			d.tag(backend)
		}
	}
}

// nodeDecoder is implemented by field types with their own YAML forms.
type nodeDecoder interface {
	decodeNode(n *yaml.Node) error
}

var nodeDecoderType = reflect.TypeFor[nodeDecoder]()

func decodeValue(f reflect.Value, n *yaml.Node) error {
	if f.Addr().Type().Implements(nodeDecoderType) {
		return f.Addr().Interface().(nodeDecoder).decodeNode(n)
	}
	switch f.Kind() {
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return fmt.Errorf("must be a string, not %s", describe(n))
		}
		f.SetString(strings.TrimSpace(n.Value))
	case reflect.Int:
		i, err := intValue(n)
		if err != nil {
			return err
		}
		f.SetInt(int64(i))
	case reflect.Float64:
		x, err := floatValue(n)
		if err != nil {
			return err
		}
		f.SetFloat(x)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
			return fmt.Errorf("must be true or false, not %s", describe(n))
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			return fmt.Errorf("must be true or false, not %s", describe(n))
		}
		f.SetBool(b)
	case reflect.Slice:
		var out []string
		for _, e := range seqOrOne(n) {
			e = deref(e)
			if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
				return fmt.Errorf("must be a list of strings, not a list holding %s", describe(e))
			}
			out = append(out, e.Value)
		}
		f.Set(reflect.ValueOf(out))
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return fmt.Errorf("must be a map, not %s", describe(n))
		}
		if f.Type().Elem().Kind() == reflect.String {
			m := map[string]string{}
			for i := 0; i+1 < len(n.Content); i += 2 {
				v := deref(n.Content[i+1])
				if v.Kind != yaml.ScalarNode {
					return fmt.Errorf("%s must be a string, not %s", n.Content[i].Value, describe(v))
				}
				m[n.Content[i].Value] = v.Value
			}
			f.Set(reflect.ValueOf(m))
			return nil
		}
		m := map[string]any{}
		if err := n.Decode(&m); err != nil {
			return fmt.Errorf("must be a map: %v", err)
		}
		f.Set(reflect.ValueOf(m))
	default:
		panic("config: unsupported field kind " + f.Kind().String())
	}
	return nil
}

func intValue(n *yaml.Node) (int, error) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, fmt.Errorf("must be a whole number, not %s", describe(n))
	}
	var i int
	if err := n.Decode(&i); err != nil {
		return 0, fmt.Errorf("must be a whole number, not %s", describe(n))
	}
	return i, nil
}

func floatValue(n *yaml.Node) (float64, error) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") {
		return 0, fmt.Errorf("must be a number, not %s", describe(n))
	}
	var x float64
	if err := n.Decode(&x); err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("must be a number, not %s", describe(n))
	}
	return x, nil
}

// GPUs is an ssh backend's gpus key: auto, none, or a list of indices.
type GPUs struct {
	Auto    bool
	None    bool
	Indices []int
}

func (g GPUs) String() string {
	switch {
	case g.Auto:
		return "auto"
	case g.None:
		return "none"
	}
	parts := make([]string, len(g.Indices))
	for i, x := range g.Indices {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

func (g *GPUs) decodeNode(n *yaml.Node) error {
	*g = GPUs{}
	bad := fmt.Errorf("must be auto, none, or GPU indices such as \"1\" or \"0,1\", not %s", describe(n))
	var items []string
	switch n.Kind {
	case yaml.ScalarNode:
		switch strings.TrimSpace(n.Value) {
		case "auto":
			g.Auto = true
			return nil
		case "none":
			g.None = true
			return nil
		}
		items = strings.Split(n.Value, ",")
	case yaml.SequenceNode:
		for _, e := range n.Content {
			e = deref(e)
			if e.Kind != yaml.ScalarNode {
				return fmt.Errorf("must be auto, none, or GPU indices such as [0, 1], not a list holding %s", describe(e))
			}
			items = append(items, e.Value)
		}
	default:
		return bad
	}
	if len(items) == 0 {
		return bad
	}
	seen := map[int]bool{}
	for _, s := range items {
		i, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || i < 0 || i > 1023 {
			if n.Kind == yaml.SequenceNode {
				return fmt.Errorf("%q is not a GPU index", s)
			}
			return bad
		}
		if seen[i] {
			return fmt.Errorf("names GPU %d twice", i)
		}
		seen[i] = true
		g.Indices = append(g.Indices, i)
	}
	return nil
}

// training decodes the model_training block.
func (d *decoder) training(k, v *yaml.Node) {
	t := &d.c.Training
	if v == nil || (v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
		d.fill(t, "model_training", TrainingKeys, nil, nil, "")
		d.fill(&t.Writeback, "model_training.writeback", WritebackKeys, nil, nil, "")
		d.fill(&t.AutoRetrain, "model_training.auto_retrain", AutoRetrainKeys, nil, nil, "")
		return
	}
	t.Line = k.Line
	if v.Kind != yaml.MappingNode {
		d.errorf(k.Line, "model_training", "model_training must be a map, not %s", describe(v))
		d.fill(t, "model_training", TrainingKeys, nil, nil, "")
		d.fill(&t.Writeback, "model_training.writeback", WritebackKeys, nil, nil, "")
		d.fill(&t.AutoRetrain, "model_training.auto_retrain", AutoRetrainKeys, nil, nil, "")
		return
	}
	vals, lines := d.checkKeys(v, "model_training", TrainingKeys, "", "")
	t.Lines = lines
	d.fill(t, "model_training", TrainingKeys, vals, lines, "")
	d.sub(&t.Writeback, &t.Writeback.Lines, "model_training.writeback", WritebackKeys, vals["writeback"], lines["writeback"])
	d.sub(&t.AutoRetrain, &t.AutoRetrain.Lines, "model_training.auto_retrain", AutoRetrainKeys, vals["auto_retrain"], lines["auto_retrain"])
	if s := vals["splits"]; s != nil {
		d.splits(s, lines["splits"])
	}
	if b := vals["backends"]; b != nil {
		d.backends(b, lines["backends"])
	}
}

func (d *decoder) sub(target any, linesOut *map[string]int, path string, table []Key, v *yaml.Node, line int) {
	if v == nil || (v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
		d.fill(target, path, table, nil, nil, "")
		return
	}
	if v.Kind != yaml.MappingNode {
		d.errorf(line, path, "%s must be a map, not %s", path, describe(v))
		d.fill(target, path, table, nil, nil, "")
		return
	}
	vals, lines := d.checkKeys(v, path, table, "", "")
	*linesOut = lines
	d.fill(target, path, table, vals, lines, "")
}

func (d *decoder) splits(v *yaml.Node, line int) {
	if v.Kind != yaml.MappingNode {
		d.errorf(line, "model_training.splits", "model_training.splits must be a map of split name to fraction, not %s", describe(v))
		return
	}
	var out []Split
	seen := map[string]int{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, e := v.Content[i], deref(v.Content[i+1])
		key := "model_training.splits." + k.Value
		if prev, dup := seen[k.Value]; dup {
			d.errorf(k.Line, key, "%s is given twice (first on line %d)", key, prev)
			continue
		}
		seen[k.Value] = k.Line
		x, err := floatValue(e)
		if err != nil {
			d.errorf(k.Line, key, "%s: %v", key, err)
			continue
		}
		out = append(out, Split{Name: k.Value, Fraction: x})
	}
	d.c.Training.Splits = out
	if d.c.Training.Lines != nil {
		for i := 0; i+1 < len(v.Content); i += 2 {
			d.c.Training.Lines["splits."+v.Content[i].Value] = v.Content[i].Line
		}
	}
}

func (d *decoder) backends(v *yaml.Node, line int) {
	if v.Kind != yaml.MappingNode {
		d.errorf(line, "model_training.backends", "model_training.backends must be a map of backend name to settings, not %s", describe(v))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, e := v.Content[i], deref(v.Content[i+1])
		name := k.Value
		path := "model_training.backends." + name
		if prev, dup := seen[name]; dup {
			d.errorf(k.Line, path, "%s is given twice (first on line %d)", path, prev)
			continue
		}
		seen[name] = k.Line
		b := &Backend{Name: name, Line: k.Line, Lines: map[string]int{}}
		if e.Kind != yaml.MappingNode {
			d.backendErrorf(b, k.Line, path, "%s must be a map with a type key, not %s", path, describe(e))
			continue
		}
		typ := scalarString(mapGet(e, "type"))
		table := KeysFor(typ)
		switch {
		case typ == "":
			d.backendErrorf(b, k.Line, path+".type", "%s has no type: give type: %s", path, backendTypeNames("or"))
			continue
		case table == nil:
			tl := k.Line
			for j := 0; j+1 < len(e.Content); j += 2 {
				if e.Content[j].Value == "type" {
					tl = e.Content[j].Line
				}
			}
			d.backendErrorf(b, tl, path+".type", "%s.type is %q: the types are %s", path, typ, backendTypeNames("and"))
			continue
		}
		vals, lines := d.checkKeys(e, path, table, typ, name)
		b.Lines = lines
		d.required(path, table, vals, k.Line, typ, name)
		d.fill(b, path, table, vals, lines, name)
		d.c.Training.Backends = append(d.c.Training.Backends, b)
	}
}

// typeOf describes a key's type for the manual.
func typeOf(name string) string {
	var probe Backend
	var tr Training
	var wb Writeback
	var ar AutoRetrain
	for _, s := range []any{&probe, &tr, &wb, &ar} {
		rt := reflect.TypeOf(s).Elem()
		for i := 0; i < rt.NumField(); i++ {
			if rt.Field(i).Tag.Get("key") != name {
				continue
			}
			switch ft := rt.Field(i).Type; {
			case ft == reflect.TypeFor[GPUs]():
				return "auto | none | indices"
			case ft.Kind() == reflect.String:
				return "string"
			case ft.Kind() == reflect.Int:
				return "integer"
			case ft.Kind() == reflect.Float64:
				return "number"
			case ft.Kind() == reflect.Bool:
				return "boolean"
			case ft.Kind() == reflect.Slice:
				return "list of strings"
			case ft.Kind() == reflect.Map:
				return "map"
			}
		}
	}
	switch name {
	case "backends", "writeback", "auto_retrain", "splits":
		return "map"
	case "acknowledge":
		return "list of strings"
	}
	return "?"
}

// maxAliasNodes bounds the nodes a config reaches through YAML aliases.
// The decoder reads an aliased node wherever it is referred to, so a few
// kilobytes of anchors and aliases (an alias bomb) could make it judge
// millions of keys; a config that shares a few settings by alias stays far
// below this.
const maxAliasNodes = 100_000

// aliasTrouble returns the first alias that makes the document
// impossible to judge, or nil: one that refers to a node containing it
// (cycle true: yaml.v3 builds such a node tree and only its decoding into
// Go values refuses it, so following the alias would never end), or the
// one at which the nodes reached through aliases pass maxAliasNodes (an
// alias bomb). Otherwise an alias refers to a node complete earlier in the
// document, so one walk in document order knows each target's expanded
// size when it meets an alias to it.
func aliasTrouble(root *yaml.Node) (alias *yaml.Node, cycle bool) {
	const ceiling = 1 << 40 // sizes saturate here, far from overflow
	const open = -1         // the size of a node whose walk has not ended
	size := map[*yaml.Node]int64{}
	var through int64
	var walk func(n *yaml.Node) int64
	walk = func(n *yaml.Node) int64 {
		if n == nil || alias != nil {
			return 0
		}
		if s, ok := size[n]; ok {
			return s
		}
		size[n] = open
		s := int64(1)
		if n.Kind == yaml.AliasNode {
			t := walk(n.Alias)
			if t == open {
				alias, cycle = n, true
				return 0
			}
			s = min(s+t, ceiling)
			through = min(through+t, ceiling)
			if alias == nil && through > maxAliasNodes {
				alias = n
			}
		} else {
			for _, c := range n.Content {
				s = min(s+walk(c), ceiling)
			}
		}
		size[n] = s
		return s
	}
	walk(root)
	return alias, cycle
}
