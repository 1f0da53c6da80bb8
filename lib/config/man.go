package config

import (
	"fmt"
	"strings"
)

// Markers around the generated part of man/potato-config.5.
const (
	ManBegin = `.\" BEGIN KEYS: generated from lib/config/keys.go by "make man"; do not edit`
	ManEnd   = `.\" END KEYS`
)

// ManKeyTables renders every key table as mdoc for potato-config(5).
func ManKeyTables() string {
	var b strings.Builder
	section := func(title, intro string, table []Key) {
		fmt.Fprintf(&b, ".Ss %s\n%s\n.Bl -tag -width Ds\n", title, intro)
		for _, k := range table {
			fmt.Fprintf(&b, ".It Ic %s Pq %s", k.Name, typeOf(k.Name))
			if k.Required {
				b.WriteString(", required")
			}
			b.WriteString("\n")
			b.WriteString(manText(k.Doc) + "\n")
			if k.Default != "" {
				fmt.Fprintf(&b, "Default:\n.Ql %s .\n", k.Default)
			}
		}
		b.WriteString(".El\n")
	}
	section("model_training", "The block itself:", TrainingKeys)
	section("model_training.writeback", "Which predictions become prelabels:", WritebackKeys)
	section("model_training.auto_retrain", "Runs started by\n.Nm potato-dispatch Cm auto :", AutoRetrainKeys)
	for _, t := range BackendTypes {
		section("Backends of type "+t.Name, "A backend entry under\n.Ic model_training.backends\nwith\n.Ql type: "+t.Name+"\naccepts these keys and no others:", t.Keys)
	}
	section("validation", "Read by\n.Xr potato-validate 1\nonly:", ValidationKeys)
	return b.String()
}

// manText escapes a line of text for mdoc.
func manText(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	// A sentence end inside a line should start a new one in roff.
	return strings.ReplaceAll(s, ". ", ".\n")
}
