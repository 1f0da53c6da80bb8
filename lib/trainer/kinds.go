package trainer

import (
	"fmt"
	"slices"
	"strings"

	"potato-training/lib/config"
)

// kindTypes are the annotation types of each kind, as the refusals name
// them (config.KindOf).
var kindTypes = map[string]string{
	string(config.KindNominal):    "radio and select",
	string(config.KindMultilabel): "multiselect",
	string(config.KindOrdinal):    "likert",
	string(config.KindContinuous): "slider and number",
	string(config.KindSpan):       "span",
	string(config.KindOther):      "text and the other types",
}

// kindOrder is the order the refusals list kinds in.
var kindOrder = []string{string(config.KindNominal), string(config.KindMultilabel), string(config.KindOrdinal),
	string(config.KindContinuous), string(config.KindSpan), string(config.KindOther)}

// Learns reports whether trainer name learns schemas of kind k: an exec:
// program is given every schema and judges for itself.
func Learns(name string, k config.Kind) bool {
	if IsExec(name) {
		return true
	}
	i, ok := Lookup(name)
	return ok && slices.Contains(i.Kinds, string(k))
}

// Learners are the runnable trainers that learn schemas of kind k, in the
// registry's order.
func Learners(k config.Kind) []string {
	var out []string
	for _, i := range Runnable() {
		if slices.Contains(i.Kinds, string(k)) {
			out = append(out, i.Name)
		}
	}
	return out
}

// typesOf lists the annotation types of a trainer's kinds: "radio, select,
// multiselect and likert".
func typesOf(kinds []string) string {
	var parts []string
	for _, k := range kindOrder {
		if slices.Contains(kinds, k) {
			parts = append(parts, kindTypes[k])
		}
	}
	return strings.ReplaceAll(joinAnd(parts), " and ", ", ")
}

func joinAnd(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}

// KindRefusal is why trainer name does not learn schema s, "" when it
// does. It names the schema's type and kind, what the trainer learns, and
// what would learn the schema: the trainers of this version that do, or,
// where none does, that no trainer does and an exec: program could.
func KindRefusal(name string, s config.Scheme) string {
	if Learns(name, s.Kind) {
		return ""
	}
	i, _ := Lookup(name)
	msg := fmt.Sprintf("schema %s is a %s schema (kind %s): %s learns %s schemas", s.Name, orType(s.AnnotationType), s.Kind, name, lastAnd(typesOf(i.Kinds)))
	if who := Learners(s.Kind); len(who) > 0 {
		verb := "learns"
		if len(who) > 1 {
			verb = "learn"
		}
		return msg + fmt.Sprintf("; %s %s %s schemas", joinAnd(who), verb, kindTypes[string(s.Kind)])
	}
	return msg + "; " + NoLearner(s.Kind)
}

// NoLearner says that no trainer of this version learns kind k, and what
// would.
func NoLearner(k config.Kind) string {
	return fmt.Sprintf("no trainer of this version learns %s schemas (kind %s): an %sPROGRAM trainer of your own, given them in the bundle (potato-events(5)), can", kindTypes[string(k)], k, ExecPrefix)
}

func orType(t string) string {
	if t == "" {
		return "typeless"
	}
	return t
}

// lastAnd turns a list's last ", " into " and ".
func lastAnd(s string) string {
	if i := strings.LastIndex(s, ", "); i >= 0 {
		return s[:i] + " and " + s[i+2:]
	}
	return s
}
