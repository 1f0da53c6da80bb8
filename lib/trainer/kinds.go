package trainer

import (
	"fmt"
	"slices"
	"strings"

	"potato-training/lib/config"
)

// Learns reports whether trainer name learns schemas of kind: a trainer
// of the registry whose Kinds hold it, or an exec: program, which is
// given any schema and judges it itself.
func Learns(name string, kind config.Kind) bool {
	if IsExec(name) {
		return true
	}
	i, ok := Lookup(name)
	return ok && slices.Contains(i.Kinds, string(kind))
}

// ForKind is the runnable trainers that learn kind, in the registry's
// order: those that predict, so not decision-calibrate, which calibrates
// a nominal schema's stored predictions.
func ForKind(kind config.Kind) []string {
	var out []string
	for _, i := range Runnable() {
		if !i.NoPredictions && slices.Contains(i.Kinds, string(kind)) {
			out = append(out, i.Name)
		}
	}
	return out
}

// Unlearned is the kinds no runnable trainer learns, with their
// annotation types: "continuous (slider, number) and other (text and the
// rest)".
func Unlearned() string {
	var ks []string
	for _, k := range config.Kinds {
		if len(ForKind(k)) == 0 {
			ks = append(ks, fmt.Sprintf("%s (%s)", k, k.Types()))
		}
	}
	return andList(ks)
}

// Learners says which trainers learn a schema of kind, for validate's
// line on each schema: "tfidf-logreg, embed-logreg", or that none does
// and what would.
func Learners(kind config.Kind) string {
	if ts := ForKind(kind); len(ts) > 0 {
		return "learned by " + strings.Join(ts, ", ")
	}
	return fmt.Sprintf("no trainer of this version learns %s schemas (%s); %s", kind, kind.Types(), nobody())
}

// nobody says what learns a kind no trainer learns.
func nobody() string {
	return "the kinds no trainer learns are " + Unlearned() + "; an " + ExecPrefix + "PROGRAM trainer, a program of your own (potato-events(5)), is given a schema of any kind"
}

// KindRefusal says why trainer name cannot learn schema sc, naming the
// trainers that learn its kind, or, when none does, the kinds none learns
// and what would learn them; "" when name learns it.
func KindRefusal(name string, sc config.Scheme) string {
	if Learns(name, sc.Kind) {
		return ""
	}
	what := fmt.Sprintf("schema %s is a %s schema (%s)", sc.Name, sc.AnnotationType, sc.Kind)
	if ts := ForKind(sc.Kind); len(ts) > 0 {
		return fmt.Sprintf("%s: %s learns %s schemas; %s %s", what, name, kindsOf(name), andList(ts), learnVerb(len(ts))+" "+string(sc.Kind)+" schemas")
	}
	return fmt.Sprintf("%s: no trainer of this version learns %s schemas; %s", what, sc.Kind, nobody())
}

// kindsOf is the kinds trainer name learns: "nominal and multilabel".
func kindsOf(name string) string {
	i, _ := Lookup(name)
	return andList(i.Kinds)
}

func learnVerb(n int) string {
	if n == 1 {
		return "learns"
	}
	return "learn"
}

// andList is "a", "a and b", "a, b and c".
func andList(xs []string) string {
	switch len(xs) {
	case 0:
		return "none"
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}

// Markers of the trainer and kind table in potato-config(5) and
// potato-agent(1), between which KindTable's text stands.
const (
	KindTableBegin = `.\" BEGIN TRAINER KINDS: generated from lib/trainer's registry by "make man"; do not edit`
	KindTableEnd   = `.\" END TRAINER KINDS`
)

// KindTable is the mdoc table of which trainer takes which kind of
// schema: a row per runnable trainer, and exec:, a column per kind, each
// kind with its annotation types below the table.
func KindTable() string {
	var b strings.Builder
	b.WriteString(".Bl -column \"hf-text-classification\"")
	for _, k := range config.Kinds {
		fmt.Fprintf(&b, " %q", string(k))
	}
	b.WriteString("\n.It Sy trainer")
	for _, k := range config.Kinds {
		fmt.Fprintf(&b, " Ta Sy %s", k)
	}
	b.WriteString("\n")
	rows := append(Runnable(), Info{Name: ExecPrefix + "PROGRAM"})
	for _, i := range rows {
		b.WriteString(".It " + i.Name)
		for _, k := range config.Kinds {
			mark := "\\-"
			if Learns(i.Name, k) {
				mark = "yes"
			}
			b.WriteString(" Ta " + mark)
		}
		b.WriteString("\n")
	}
	b.WriteString(".El\n.Pp\nThe kinds by\n.Ic annotation_type :\n")
	for n, k := range config.Kinds {
		sep := ","
		if n == len(config.Kinds)-1 {
			sep = "."
		}
		fmt.Fprintf(&b, ".Sy %s\n.Pq %s %s\n", k, k.Types(), sep)
	}
	fmt.Fprintf(&b, "No trainer of this version learns %s schemas.\n", Unlearned())
	return b.String()
}
