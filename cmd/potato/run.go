package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"potato-training/internal/cli"
	"potato-training/lib/trainer"
)

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
		fmt.Fprintln(stdout, cli.VersionText())
		return cli.ExitOK
	case len(args) == 1 && isGroup(args[0]):
		shortUsage(stderr, args[0])
		return cli.ExitUsage
	case len(args) == 2 && isGroup(args[0]) && isHelp(args[1]):
		usage(stdout, args[0])
		return cli.ExitOK
	}
	if !ours(args[0]) {
		return passOn(args, stderr)
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
	path, err := trainer.FindProgram(r.binary)
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %s is not installed beside potato or on PATH\n", name, r.binary)
		return 127
	}
	// exec replaces this process: standard input and output, signals and
	// the exit status are the child's own. The binary's help names the
	// command as it was typed.
	argv := append([]string{r.binary}, rest...)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, cli.InvokedAsVar+"=") || strings.HasPrefix(kv, passedVar+"=")
	})
	env = append(env, cli.InvokedAsVar+"="+r.invokedAs())
	err = syscall.Exec(path, argv, env)
	fmt.Fprintf(stderr, "%s: error: cannot run %s: %v\n", name, path, err)
	return 126
}

// invokedAs is how the binary of r names itself in its help and usage:
// the words typed for it, less those the route passes on as the binary's
// own subcommand ("potato training" for potato-dispatch run, whose usage
// adds "run").
func (r route) invokedAs() string {
	return strings.Join(append([]string{name}, r.words[:len(r.words)-len(r.prefix)]...), " ")
}
