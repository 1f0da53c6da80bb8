package trainer

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"potato-training/lib/config"
)

var update = flag.Bool("update", false, "rewrite the trainer and kind tables of man/potato-config.5 and man/potato-agent.1")

// The trainer and kind table of potato-config(5) and potato-agent(1) is
// made from the registry; the committed pages must match it ("make man"
// rewrites them).
func TestManPageKindTable(t *testing.T) {
	want := KindTable()
	for _, page := range []string{"potato-config.5", "potato-agent.1"} {
		path := filepath.Join("..", "..", "man", page)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		i, j := strings.Index(s, KindTableBegin+"\n"), strings.Index(s, KindTableEnd+"\n")
		if i < 0 || j < i {
			t.Fatalf("%s lacks the markers %q and %q", path, KindTableBegin, KindTableEnd)
		}
		start := i + len(KindTableBegin) + 1
		if s[start:j] == want {
			continue
		}
		if *update {
			if err := os.WriteFile(path, []byte(s[:start]+want+s[j:]), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s's trainer and kind table is out of date with the registry: run make man", path)
	}
	// The table says what the registry says: a row per trainer, yes
	// where its Kinds hold the column's kind.
	for _, i := range Runnable() {
		var row string
		for _, line := range strings.Split(want, "\n") {
			if strings.HasPrefix(line, ".It "+i.Name+" Ta ") {
				row = line
			}
		}
		cells := strings.Split(row, " Ta ")[1:]
		if len(cells) != len(config.Kinds) {
			t.Fatalf("%s: row %q", i.Name, row)
		}
		for n, k := range config.Kinds {
			if got := cells[n] == "yes"; got != slices.Contains(i.Kinds, string(k)) {
				t.Errorf("%s, %s: the table says %q, the registry's kinds are %v", i.Name, k, cells[n], i.Kinds)
			}
		}
	}
}

// Learns, ForKind and the refusals read the registry's Kinds: a trainer
// learns what it declares, exec: anything, and a refusal names the
// trainers that learn the kind, or, where none does, the kinds no trainer
// learns and what would learn them.
func TestKinds(t *testing.T) {
	for _, i := range Runnable() {
		for _, k := range config.Kinds {
			if Learns(i.Name, k) != slices.Contains(i.Kinds, string(k)) {
				t.Errorf("Learns(%s, %s) = %v; its Kinds are %v", i.Name, k, Learns(i.Name, k), i.Kinds)
			}
		}
	}
	if !Learns("exec:/bin/train", config.KindOther) || Learns("no-such-trainer", config.KindNominal) {
		t.Error("exec: learns every kind, an unknown trainer none")
	}
	if got := ForKind(config.KindOrdinal); !slices.Contains(got, "embed-logreg") {
		t.Errorf("ForKind(ordinal) = %v, want embed-logreg among them", got)
	}
	if got := ForKind(config.KindNominal); slices.Contains(got, "decision-calibrate") || !slices.Contains(got, "embed-logreg") {
		t.Errorf("ForKind(nominal) = %v: the trainers that predict, decision-calibrate not among them", got)
	}
	likert := config.Scheme{Name: "mood", AnnotationType: "likert", Kind: config.KindOrdinal}
	if msg := KindRefusal("embed-logreg", likert); msg != "" {
		t.Errorf("embed-logreg refuses a likert schema: %s", msg)
	}
	if !Learns("tfidf-logreg", config.KindOrdinal) {
		msg := KindRefusal("tfidf-logreg", likert)
		if !strings.Contains(msg, "schema mood is a likert schema (ordinal): tfidf-logreg learns ") || !strings.Contains(msg, "embed-logreg") {
			t.Errorf("refusal of tfidf-logreg for a likert schema: %q", msg)
		}
	}
	text := config.Scheme{Name: "notes", AnnotationType: "text", Kind: config.KindOther}
	msg := KindRefusal("embed-logreg", text)
	for _, want := range []string{"schema notes is a text schema (other): no trainer of this version learns other schemas", "other (text and the rest)", "exec:PROGRAM"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal of a text schema %q lacks %q", msg, want)
		}
	}
	if KindRefusal("exec:/bin/train", text) != "" {
		t.Error("exec: refuses a text schema")
	}
	if u := Unlearned(); !strings.Contains(u, "other (text and the rest)") || strings.Contains(u, "nominal") {
		t.Errorf("Unlearned() = %q", u)
	}
}

// embed-logreg runs as its launcher beside hf-text-classification's, in the
// same tree the python interpreter is given.
func TestArgvEmbed(t *testing.T) {
	dir := t.TempDir()
	argv, err := Argv("embed-logreg", filepath.Join(dir, "spec.json"), Programs{Python: "/usr/bin/python3", ScriptDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	hfArgv, _ := Argv("hf-text-classification", filepath.Join(dir, "spec.json"), Programs{Python: "/usr/bin/python3", ScriptDir: dir})
	if len(argv) != 4 || argv[0] != "/usr/bin/python3" || filepath.Base(argv[1]) != "embed_logreg.py" ||
		filepath.Dir(argv[1]) != filepath.Dir(hfArgv[1]) || argv[2] != "--spec" {
		t.Fatalf("argv %q (hf-text-classification's %q)", argv, hfArgv)
	}
	if _, err := os.Stat(argv[1]); err != nil {
		t.Errorf("the launcher is not written: %v", err)
	}
}
