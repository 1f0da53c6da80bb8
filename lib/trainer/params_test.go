package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"potato-training/lib/config"
	"potato-training/lib/events"
	"potato-training/lib/trainer/hf"
)

// A run's parameters are checked against the declaration: an unknown name
// (with the nearest declared one), a value of the wrong kind or out of its
// range are refused; the defaults fill in the rest; an empty value is the
// default.
func TestParamsParse(t *testing.T) {
	ps := Trainers["tfidf-logreg"].Params
	cases := []struct {
		params map[string]string
		want   string
	}{
		{map[string]string{"epocs": "5"}, `trainer tfidf-logreg has no parameter "epocs" (did you mean epochs?)`},
		{map[string]string{"frobnicate": "5"}, `trainer tfidf-logreg has no parameter "frobnicate"`},
		{map[string]string{"epochs": "abc"}, `param epochs="abc" is not a whole number`},
		{map[string]string{"epochs": "0"}, `param epochs="0" is not 1 or more`},
		{map[string]string{"epochs": "2.5"}, `param epochs="2.5" is not a whole number`},
		{map[string]string{"l2": "0"}, `param l2="0" is not more than 0`},
		{map[string]string{"learning_rate": "NaN"}, `param learning_rate="NaN" is not a number`},
		{map[string]string{"learning_rate": "inf"}, `param learning_rate="inf" is not a number`},
	}
	for _, c := range cases {
		_, err := ps.Parse("tfidf-logreg", c.params)
		var pe *ParamError
		if !errors.As(err, &pe) || err.Error() != c.want {
			t.Errorf("%v: %v, want %q", c.params, err, c.want)
		}
	}
	v, err := ps.Parse("tfidf-logreg", map[string]string{"epochs": " 7 ", "patience": "", "l2": "1e-3"})
	if err != nil {
		t.Fatal(err)
	}
	if v.Int("epochs") != 7 || v.Int("patience") != 3 || v.Float("l2") != 1e-3 || v.Float("learning_rate") != 0.5 || v.Int("min_df") != 0 || v.Has("min_df") {
		t.Errorf("values %v", v.m)
	}

	cal := Trainers["decision-calibrate"].Params
	if _, err := cal.Parse("decision-calibrate", map[string]string{"target_precision": "1.5"}); err == nil ||
		err.Error() != `param target_precision="1.5" is not above 0 and at most 1` {
		t.Errorf("target_precision=1.5: %v", err)
	}
	if _, err := cal.Parse("decision-calibrate", map[string]string{"method": "spline"}); err == nil ||
		err.Error() != `param method="spline" is not auto, platt or isotonic` {
		t.Errorf("method=spline: %v", err)
	}
	if err := CheckParams("exec:./mine", map[string]string{"anything": "goes"}); err != nil {
		t.Errorf("exec: trainer: %v", err)
	}
}

// Every default of every declaration is a value its own parameter takes.
func TestParamDefaultsParse(t *testing.T) {
	for _, i := range registry {
		for _, p := range i.Params {
			if p.Default == "" {
				if p.DefaultNote == "" && p.Kind != KindList {
					t.Errorf("%s %s: no default and no note on it", i.Name, p.Name)
				}
				continue
			}
			if _, err := p.Parse(p.Default); err != nil {
				t.Errorf("%s %s: default: %v", i.Name, p.Name, err)
			}
		}
	}
}

// The built-in trainer reads its parameters through the declaration: an
// unknown one, or decision-calibrate's target out of range, ends the
// training process with bad_spec before it reads anything else.
func TestWorkerRefusesParams(t *testing.T) {
	unknown := writeBundle(t, config.KindNominal, 60, map[string]string{"epocs": "5"})
	calib := writeBundle(t, config.KindNominal, 60, map[string]string{"target_precision": "1.5"})
	calib.Trainer = "decision-calibrate"
	for name, c := range map[string]struct {
		spec Spec
		want string
	}{
		"unknown": {unknown, `trainer tfidf-logreg has no parameter "epocs" (did you mean epochs?)`},
		"range":   {calib, `param target_precision="1.5" is not above 0 and at most 1`},
	} {
		var out, errb bytes.Buffer
		code := Worker(context.Background(), writeSpec(t, c.spec), &out, &errb)
		evs := parseEvents(t, out.Bytes())
		last := evs[len(evs)-1]
		if code != events.ExitBadSpec || last.Kind != events.KindError || last.String("code") != events.CodeBadSpec || last.String("message") != c.want {
			t.Errorf("%s: exit %d, last event %v", name, code, last)
		}
	}
}

// The script's PARAMS table and the Go declaration of hf-text-classification,
// both read from its params.json, agree: the same names in the same order,
// kinds and defaults, and parse_params, which checks values against the
// table's bounds and choices in its own code, accepts exactly the probe
// values the declaration accepts.
// The script is imported by Debian's python3, which has no need of torch
// for this.
func TestHFParamsAgree(t *testing.T) {
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skip("no /usr/bin/python3 on this machine")
	}
	ps := Trainers[hf.Name].Params
	probes := map[string][]string{
		KindInt:    {"abc", "1.5", "-1", "0", "1", "2", "15", "16", "100000", "1e3"},
		KindFloat:  {"abc", "nan", "inf", "-0.5", "0", "0.1", "0.5", "1", "1.5", "2e-4"},
		KindBool:   {"true", "no", "ON", "0", "maybe"},
		KindString: {"auto", "fp16", "fp8", "builtin:ngram", "builtin:nope", "distilbert-base-uncased"},
		KindList:   {"q,v", "query"},
	}
	type probe struct{ Name, Value string }
	var all []probe
	for _, p := range ps {
		for _, v := range probes[p.Kind] {
			all = append(all, probe{p.Name, v})
		}
	}
	pairs := make([][2]string, len(all))
	for i, pr := range all {
		pairs[i] = [2]string{pr.Name, pr.Value}
	}
	got := pythonParams(t, python, `from potato_hf import spec as m`, pairs)
	var pyNames, goNames []string
	for _, row := range got.Params {
		pyNames = append(pyNames, row[0].(string))
	}
	for _, p := range ps {
		goNames = append(goNames, p.Name)
	}
	if !slices.Equal(pyNames, goNames) {
		t.Fatalf("the script's PARAMS are %q; the Go declaration has %q", pyNames, goNames)
	}
	for i, row := range got.Params {
		p := ps[i]
		if kind := row[1].(string); kind != p.Kind {
			t.Errorf("%s: kind %s in the script, %s in Go", p.Name, kind, p.Kind)
		}
		def := row[2]
		switch {
		case def == nil:
			if p.Default != "" {
				t.Errorf("%s: the script has no default (the trainer chooses); Go has %q", p.Name, p.Default)
			}
			continue
		case p.Default == "":
			t.Errorf("%s: the script's default is %v; Go has none", p.Name, def)
			continue
		}
		x, err := p.Parse(p.Default)
		if err != nil {
			t.Errorf("%s: Go default: %v", p.Name, err)
			continue
		}
		same := false
		switch d := def.(type) {
		case float64:
			switch n := x.(type) {
			case int64:
				same = float64(n) == d
			case float64:
				same = n == d
			}
		case bool, string:
			same = x == d
		}
		if !same {
			t.Errorf("%s: default %v in the script, %q in Go", p.Name, def, p.Default)
		}
	}
	if len(got.Accepted) != len(all) {
		t.Fatalf("%d answers for %d probes", len(got.Accepted), len(all))
	}
	for i, pr := range all {
		p, _ := ps.Lookup(pr.Name)
		_, err := p.Parse(pr.Value)
		if goOK := err == nil; goOK != got.Accepted[i] {
			t.Errorf("%s=%s: the script accepts it: %v; Go: %v", pr.Name, strconv.Quote(pr.Value), got.Accepted[i], err)
		}
	}
}

// potato-dispatch(1) lists each trainer's parameters as the registry
// declares them, in its PARAMETERS section.
func TestManPageParamsAreTheRegistry(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "man", "potato-dispatch.1"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	start := strings.Index(page, "\n.Sh PARAMETERS\n")
	if start < 0 {
		t.Fatal("potato-dispatch.1 has no PARAMETERS section")
	}
	sec := page[start+1:]
	sec = sec[:strings.Index(sec[1:], "\n.Sh ")+1]
	for _, i := range Runnable() {
		head := strings.Index(sec, "\n.Ss "+i.Name+"\n")
		if head < 0 {
			t.Errorf("no .Ss %s in PARAMETERS", i.Name)
			continue
		}
		sub := sec[head+1:]
		if end := strings.Index(sub[1:], "\n.Ss "); end >= 0 {
			sub = sub[:end+1]
		}
		var inMan []string
		for _, line := range strings.Split(sub, "\n") {
			if name, ok := strings.CutPrefix(line, ".It Ic "); ok {
				inMan = append(inMan, strings.Fields(name)[0])
			}
		}
		var want []string
		for _, p := range i.Params {
			want = append(want, p.Name)
		}
		if !slices.Equal(inMan, want) {
			t.Errorf("potato-dispatch.1 lists the parameters of %s as %q; the registry has %q", i.Name, inMan, want)
		}
	}
}

// pyParams is what a trainer's script says of its parameters: its PARAMS
// table (name, kind, default) and whether its parse_params accepts each
// probe, one --param NAME=VALUE at a time.
type pyParams struct {
	Params   [][3]any `json:"params"`
	Accepted []bool   `json:"accepted"`
}

// pythonParams asks python for the pyParams of the module that setup, a
// few lines of Python, imports as m (with the package's spec module's
// TrainerError), for the probes pairs.
func pythonParams(t *testing.T, python, setup string, pairs [][2]string) pyParams {
	t.Helper()
	in, _ := json.Marshal(pairs)
	script := "import json, sys\nsys.path.insert(0, sys.argv[1])\n" + setup + `
from potato_hf.spec import TrainerError
out = {"params": [[k, kind, d] for k, (kind, d) in m.PARAMS.items()], "accepted": []}
for name, value in json.load(sys.stdin):
    try:
        m.parse_params({name: value})
        out["accepted"].append(True)
    except TrainerError:
        out["accepted"].append(False)
print(json.dumps(out))
`
	cmd := exec.Command(python, "-c", script, filepath.Join("hf", "python"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", python, err, stderr.String())
	}
	var got pyParams
	if err := json.Unmarshal(out, &got); err != nil || len(got.Accepted) != len(pairs) {
		t.Fatalf("%v: %s", err, out)
	}
	return got
}
