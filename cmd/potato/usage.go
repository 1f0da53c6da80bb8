package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// usage lists the verbs whose words start with group ("" for all of
// them, "training" for potato training's).
func usage(w io.Writer, group string) {
	prog := strings.TrimSpace(name + " " + group)
	fmt.Fprintf(w, "Usage: %s <verb> [args...]\n\nVerbs:\n", prog)
	for _, r := range routes {
		words := r.words
		if group != "" {
			if words[0] != group || len(words) < 2 {
				continue
			}
			words = words[1:]
		}
		fmt.Fprintf(w, "  %-20s %s (%s)\n", strings.Join(words, " "), r.help, r.binary)
	}
	fmt.Fprintf(w, "\nEach verb takes the arguments of its binary; \"%s VERB --help\" shows them.\n", prog)
	if group == "" {
		// The rest go to Potato's own command; say which one this PATH
		// gives, since the order of PATH decides it.
		fmt.Fprintf(w, "\nAny other verb, such as \"potato start config.yaml\", goes to Potato's own\n"+
			"potato command (potato-annotation): the next potato on PATH that is not\n"+
			"this one, else python -m potato by the Python beside it. ")
		switch p, err := potatoCommand(); {
		case err == nil:
			fmt.Fprintf(w, "Here that is %s.\n", p)
		case errors.Is(err, errNoPotato):
			self, _ := selfPath()
			if py := potatoModule(self); py != "" {
				fmt.Fprintf(w, "Here that is %s -m potato.\n", py)
			} else {
				fmt.Fprintf(w, "Here there is none.\n")
			}
		default:
			fmt.Fprintf(w, "Here there is none (%v).\n", err)
		}
	}
	fmt.Fprintf(w, "\nSee potato(1).\n")
}

// shortUsage is the synopsis of potato(1), for group's verbs ("" for all
// of them): what a command given no verb prints on standard error.
func shortUsage(w io.Writer, group string) {
	var lines []string
	seen := map[string]int{}
	for _, r := range routes {
		if group != "" && r.words[0] != group {
			continue
		}
		if i, ok := seen[r.words[0]]; ok && len(r.words) > 1 {
			lines[i] += "|" + r.words[1]
			continue
		}
		seen[r.words[0]] = len(lines)
		lines = append(lines, name+" "+strings.Join(r.words, " "))
	}
	for i, l := range lines {
		lead := "       "
		if i == 0 {
			lead = "Usage: "
		}
		fmt.Fprintf(w, "%s%s [args...]\n", lead, l)
	}
	if group == "" {
		fmt.Fprintf(w, "       %s start|migrate|... [args...]   (Potato's own potato)\n", name)
	}
	fmt.Fprintf(w, "See %s --help, or potato(1).\n", strings.TrimSpace(name+" "+group))
}

// isGroup tells whether word is the first word of verbs of two words
// ("training").
func isGroup(word string) bool {
	for _, r := range routes {
		if len(r.words) > 1 && r.words[0] == word {
			return true
		}
	}
	return false
}

func isHelp(arg string) bool { return arg == "--help" || arg == "-h" || arg == "help" }
