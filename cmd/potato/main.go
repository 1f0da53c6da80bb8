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
	{[]string{"training", "auto"}, "potato-dispatch", []string{"auto"}, "start a run when auto_retrain calls for one (cron)"},
	{[]string{"serve"}, "potato-server", nil, "run the Training page and the agents' server"},
}

const name = "potato"

func usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: potato <verb> [args...]\n\nVerbs:\n")
	for _, r := range routes {
		fmt.Fprintf(w, "  %-20s %s (%s)\n", strings.Join(r.words, " "), r.help, r.binary)
	}
	fmt.Fprintf(w, "\nEach verb takes the arguments of its binary; \"potato VERB --help\" shows them.\n\nSee potato(1).\n")
}

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
	what := "nothing"
	if len(args) > 0 {
		what = fmt.Sprintf("%q", strings.Join(args[:min(len(args), 2)], " "))
	}
	return route{}, nil, fmt.Errorf("unknown verb %s: the verbs are %s", what, strings.Join(verbs, ", "))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
		usage(stdout)
		return cli.ExitOK
	}
	if len(args) == 1 && args[0] == "--version" {
		fmt.Fprintln(stdout, cli.Version)
		return cli.ExitOK
	}
	r, rest, err := resolve(args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %v\n", name, err)
		fmt.Fprintf(stderr, "%s: hint: see potato --help\n", name)
		return cli.ExitUsage
	}
	path, err := cli.FindSibling(r.binary)
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %s is not installed beside potato or on PATH\n", name, r.binary)
		return 127
	}
	// exec replaces this process: standard input and output, signals and
	// the exit status are the child's own.
	argv := append([]string{r.binary}, rest...)
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(stderr, "%s: error: cannot run %s: %v\n", name, path, err)
	return 126
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
