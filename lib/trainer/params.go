package trainer

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Kinds of parameter values, named as the hf-text-classification trainer's
// params.json names them.
const (
	KindInt    = "int"
	KindFloat  = "float"
	KindBool   = "bool"
	KindString = "str"
	KindList   = "list"
)

// Range bounds a number parameter; math.Inf for no bound.
type Range struct {
	Min, Max         float64
	MinOpen, MaxOpen bool // the bound itself is outside the range
}

// AtLeast is [min, +inf).
func AtLeast(min float64) *Range { return &Range{Min: min, Max: math.Inf(1)} }

// Above is (min, +inf).
func Above(min float64) *Range { return &Range{Min: min, Max: math.Inf(1), MinOpen: true} }

// Contains reports whether x is in the range.
func (r *Range) Contains(x float64) bool {
	if r == nil {
		return true
	}
	if x < r.Min || r.MinOpen && x == r.Min || x > r.Max || r.MaxOpen && x == r.Max {
		return false
	}
	return true
}

// String says the range as the errors and the help say it: "1 or more",
// "more than 0", "at least 0 and below 1".
func (r *Range) String() string {
	if r == nil {
		return ""
	}
	lo, hi := !math.IsInf(r.Min, -1), !math.IsInf(r.Max, 1)
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	switch {
	case lo && hi && r.MinOpen && r.MaxOpen:
		return "between " + g(r.Min) + " and " + g(r.Max)
	case lo && hi:
		a, b := "at least "+g(r.Min), "at most "+g(r.Max)
		if r.MinOpen {
			a = "above " + g(r.Min)
		}
		if r.MaxOpen {
			b = "below " + g(r.Max)
		}
		return a + " and " + b
	case lo && r.MinOpen:
		return "more than " + g(r.Min)
	case lo:
		return g(r.Min) + " or more"
	case hi && r.MaxOpen:
		return "below " + g(r.Max)
	case hi:
		return "at most " + g(r.Max)
	}
	return ""
}

// Param declares one parameter of a trainer: what --param NAME=VALUE and
// model_training.auto_retrain.params accept for it.
type Param struct {
	Name string
	Kind string // KindInt, ...
	// Default is the value a run without the parameter gets, as a
	// --param value; "" when the trainer chooses it from other
	// parameters, which DefaultNote then says.
	Default     string
	DefaultNote string
	// Range bounds an int or float; nil for none.
	Range *Range
	// Choices are a str parameter's only values; nil for any.
	Choices []string
	// Check refuses other values of a str parameter: it returns what the
	// value is not ("a model name or builtin:ngram"), "" when it is fine.
	Check func(v string) string
	// Help is a few words on what it does.
	Help string
}

// Params is a trainer's parameters, in the order the help lists them.
type Params []Param

// Lookup finds a parameter by name.
func (ps Params) Lookup(name string) (Param, bool) {
	for _, p := range ps {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// what is what a value of p must be, for its errors.
func (p Param) what() string {
	switch p.Kind {
	case KindInt:
		return "a whole number"
	case KindFloat:
		return "a number"
	case KindBool:
		return "true or false"
	}
	return "text"
}

// Parse turns a value of p into its type: int64, float64, bool, string or
// []string. An error is a *ParamError.
func (p Param) Parse(v string) (any, error) {
	bad := func(want string) error { return &ParamError{Name: p.Name, Value: v, Want: want} }
	s := strings.TrimSpace(v)
	var x any
	var num float64
	switch p.Kind {
	case KindInt:
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, bad(p.what())
		}
		x, num = n, float64(n)
	case KindFloat:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, bad(p.what())
		}
		x, num = f, f
	case KindBool:
		switch strings.ToLower(s) {
		case "1", "true", "yes", "on":
			return true, nil
		case "0", "false", "no", "off":
			return false, nil
		}
		return nil, bad(p.what())
	case KindList:
		var out []string
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
		return out, nil
	default:
		if len(p.Choices) > 0 && !slices.Contains(p.Choices, s) {
			return nil, bad(orList(p.Choices))
		}
		if p.Check != nil {
			if want := p.Check(s); want != "" {
				return nil, bad(want)
			}
		}
		return s, nil
	}
	if !p.Range.Contains(num) {
		return nil, bad(p.Range.String())
	}
	return x, nil
}

// ParamError is a parameter a trainer refuses: one it does not have, or a
// value it does not take.
type ParamError struct {
	Trainer     string
	Name, Value string
	// Want is what the value must be; "" for an unknown parameter.
	Want string
	// Suggest is a parameter of the trainer with a name close to Name's.
	Suggest string
}

func (e *ParamError) Error() string {
	if e.Want == "" {
		s := fmt.Sprintf("trainer %s has no parameter %q", e.Trainer, e.Name)
		if e.Suggest != "" {
			s += fmt.Sprintf(" (did you mean %s?)", e.Suggest)
		}
		return s
	}
	return fmt.Sprintf("param %s=%q is not %s", e.Name, e.Value, e.Want)
}

// Values are a run's parameters, typed, with the defaults filled in.
type Values struct {
	ps Params
	m  map[string]any
}

// Parse checks params against the declaration (every name declared,
// every value of its kind and in its range; an empty value is the
// default) and returns them typed. trainer names the trainer in errors,
// each a *ParamError; the first in name order is returned.
func (ps Params) Parse(trainer string, params map[string]string) (Values, error) {
	v := Values{ps: ps, m: map[string]any{}}
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		p, ok := ps.Lookup(k)
		if !ok {
			return v, &ParamError{Trainer: trainer, Name: k, Suggest: ps.closest(k)}
		}
		if strings.TrimSpace(params[k]) == "" {
			continue
		}
		x, err := p.Parse(params[k])
		if err != nil {
			err.(*ParamError).Trainer = trainer
			return v, err
		}
		v.m[k] = x
	}
	for _, p := range ps {
		if _, ok := v.m[p.Name]; ok || p.Default == "" {
			continue
		}
		x, err := p.Parse(p.Default)
		if err != nil {
			panic(fmt.Sprintf("trainer %s: the default of %s: %v", trainer, p.Name, err))
		}
		v.m[p.Name] = x
	}
	return v, nil
}

// Has reports whether a run has a value for name, given or by default.
func (v Values) Has(name string) bool { _, ok := v.m[name]; return ok }

func (v Values) get(name, kind string) any {
	p, ok := v.ps.Lookup(name)
	if !ok || p.Kind != kind {
		panic(fmt.Sprintf("trainer: no %s parameter %s is declared", kind, name))
	}
	return v.m[name]
}

// Int is an int parameter's value; 0 when it has none.
func (v Values) Int(name string) int {
	n, _ := v.get(name, KindInt).(int64)
	return int(n)
}

// Float is a float parameter's value; 0 when it has none.
func (v Values) Float(name string) float64 {
	f, _ := v.get(name, KindFloat).(float64)
	return f
}

// String is a str parameter's value; "" when it has none.
func (v Values) String(name string) string {
	s, _ := v.get(name, KindString).(string)
	return s
}

// Bool is a bool parameter's value; false when it has none.
func (v Values) Bool(name string) bool {
	b, _ := v.get(name, KindBool).(bool)
	return b
}

// closest is the declared name nearest to name, when it is near enough
// to be a slip of the keyboard.
func (ps Params) closest(name string) string {
	best, bestD := "", 3
	for _, p := range ps {
		if d := editDistance(name, p.Name); d < bestD {
			best, bestD = p.Name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

// Describe is one line on p, as the help and the errors list it:
//
//	epochs           whole number, 1 or more; default 30
func (p Param) Describe() string {
	var kind string
	switch p.Kind {
	case KindInt:
		kind = "whole number"
	case KindFloat:
		kind = "number"
	case KindBool:
		kind = "true or false"
	case KindList:
		kind = "comma-separated list"
	default:
		kind = "text"
		if len(p.Choices) > 0 {
			kind = orList(p.Choices)
		}
	}
	if r := p.Range.String(); r != "" {
		kind += ", " + r
	}
	def := p.Default
	if def == "" {
		def = p.DefaultNote
	}
	if def != "" {
		kind += "; default " + def
	}
	return fmt.Sprintf("%-16s %s", p.Name, kind)
}

// ParamsHelp lists a trainer's parameters, one indented line each (with
// detail, each also followed by its Help on a line of its own), or says
// why it has none to list.
func ParamsHelp(name string, detail bool) string {
	if strings.HasPrefix(name, ExecPrefix) {
		return "  any: an exec: trainer's parameters are its own"
	}
	info, ok := Lookup(name)
	if !ok {
		return ""
	}
	var b strings.Builder
	for i, p := range info.Params {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("  " + p.Describe())
		if detail {
			b.WriteString("\n      " + p.Help)
		}
	}
	return b.String()
}

// CheckParams checks the parameters of a run of trainer name before the
// run is recorded: an exec: trainer takes any, a trainer of the registry
// those it declares. The error is a *ParamError.
func CheckParams(name string, params map[string]string) error {
	if strings.HasPrefix(name, ExecPrefix) {
		return nil
	}
	info, ok := Lookup(name)
	if !ok {
		return nil // the caller refuses an unknown trainer
	}
	_, err := info.Params.Parse(name, params)
	return err
}

// ParamString is the --param value of a model_training.auto_retrain.params
// value, as YAML gives it: a string as it is, a list as its items joined by
// commas, anything else as JSON.
func ParamString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = ParamString(e)
		}
		return strings.Join(parts, ",")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
