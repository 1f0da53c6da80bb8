// Command potato is the toolkit's front command: "potato validate ...",
// "potato training VERB ..." and "potato serve ..." run the matching
// potato-* binary, found beside this executable first and then on PATH,
// with arguments, standard input and output, and the exit status passed
// through. See potato(1).
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"potato-training/internal/cli"
)

// route is one verb of the front command.
type route struct {
	words  []string // "training", "run"
	binary string   // "potato-dispatch"
	prefix []string // arguments put before the user's: "run"
	help   string
}

var routes = []route{
	{[]string{"validate"}, "potato-validate", nil, "check a config's model_training block"},
	{[]string{"training", "check"}, "potato-check", nil, "can a run start on a backend now?"},
	{[]string{"training", "register"}, "potato-register", nil, "issue an agent backend's token"},
	{[]string{"training", "agent"}, "potato-agent", nil, "run the agent on a training machine"},
	{[]string{"training", "run"}, "potato-dispatch", []string{"run"}, "start a run and wait for its end"},
	{[]string{"training", "cancel"}, "potato-dispatch", []string{"cancel"}, "cancel a run"},
	{[]string{"training", "status"}, "potato-dispatch", []string{"status"}, "show runs and their states"},
	{[]string{"training", "wait"}, "potato-dispatch", []string{"wait"}, "wait for runs to end; exit with their status"},
	{[]string{"training", "latest"}, "potato-dispatch", []string{"latest"}, "print the newest successful run and its model"},
	{[]string{"training", "auto"}, "potato-dispatch", []string{"auto"}, "start a run when auto_retrain calls for one (cron)"},
	{[]string{"training", "writeback"}, "potato-dispatch", []string{"writeback"}, "apply a finished run to Potato's store again"},
	{[]string{"training", "retract"}, "potato-dispatch", []string{"retract"}, "delete a finished run's prelabels from Potato's store"},
	{[]string{"serve"}, "potato-server", nil, "run the Training page and the agents' server"},
}

const name = "potato"

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
	fmt.Fprintf(w, "\nEach verb takes the arguments of its binary; \"%s VERB --help\" shows them.\n\nSee potato(1).\n", prog)
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

// resolve finds the route of args and the arguments for its binary.
func resolve(args []string) (route, []string, error) {
	var verbs []string
	for _, r := range routes {
		verbs = append(verbs, strings.Join(r.words, " "))
	}
	for _, r := range routes {
		if len(args) >= len(r.words) && slices.Equal(args[:len(r.words)], r.words) {
			rest := append(append([]string{}, r.prefix...), args[len(r.words):]...)
			return r, rest, nil
		}
	}
	what := fmt.Sprintf("%q", strings.Join(args[:min(len(args), 2)], " "))
	return route{}, nil, fmt.Errorf("unknown verb %s: the verbs are %s", what, strings.Join(verbs, ", "))
}

// invokedAs is how the binary of r names itself in its help and usage:
// the words typed for it, less those the route passes on as the binary's
// own subcommand ("potato training" for potato-dispatch run, whose usage
// adds "run").
func (r route) invokedAs() string {
	return strings.Join(append([]string{name}, r.words[:len(r.words)-len(r.prefix)]...), " ")
}

func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		// No verb is a usage error: the synopsis goes to standard error.
		shortUsage(stderr, "")
		return cli.ExitUsage
	case len(args) == 1 && isHelp(args[0]):
		usage(stdout, "")
		return cli.ExitOK
	case len(args) == 1 && args[0] == "--version":
		fmt.Fprintln(stdout, cli.Version)
		return cli.ExitOK
	case len(args) == 1 && isGroup(args[0]):
		shortUsage(stderr, args[0])
		return cli.ExitUsage
	case len(args) == 2 && isGroup(args[0]) && isHelp(args[1]):
		usage(stdout, args[0])
		return cli.ExitOK
	}
	r, rest, err := resolve(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %v\n", name, err)
		hint := "potato --help"
		if isGroup(args[0]) {
			hint = "potato " + args[0] + " --help"
		}
		fmt.Fprintf(stderr, "%s: hint: see %s\n", name, hint)
		return cli.ExitUsage
	}
	path, err := cli.FindSibling(r.binary)
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %s is not installed beside potato or on PATH\n", name, r.binary)
		return 127
	}
	// exec replaces this process: standard input and output, signals and
	// the exit status are the child's own. The binary's help names the
	// command as it was typed.
	argv := append([]string{r.binary}, rest...)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, cli.InvokedAsVar+"=") })
	env = append(env, cli.InvokedAsVar+"="+r.invokedAs())
	err = syscall.Exec(path, argv, env)
	fmt.Fprintf(stderr, "%s: error: cannot run %s: %v\n", name, path, err)
	return 126
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
