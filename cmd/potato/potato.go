package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"potato-training/internal/cli"
	"potato-training/lib/bundle"
)

// A verb that is not the toolkit's ("potato start config.yaml", and every
// other verb of the released Potato) goes to Potato's own potato command,
// the console script of potato-annotation that this command shadows when
// it comes first on PATH. See potato(1).

// passedVar lists, separated as PATH is, the front commands a verb that
// is not ours has already passed through, each as its resolved path. A
// front command skips them and itself when it looks for Potato's potato,
// so two front commands of different builds on PATH hand the verb on to
// the next potato rather than back to each other.
const passedVar = "POTATO_FRONT_PASSED"

// maxPassed bounds that chain: more front commands than this in a row is
// a loop the list did not catch (a path with the separator in it, say).
const maxPassed = 8

// errNoPotato is findPotato's answer when PATH holds no potato but this
// command and the front commands already passed through.
var errNoPotato = errors.New("no other potato command on PATH")

// findPotato returns the first file named potato in the directories of
// path that is executable and is neither this command's executable nor
// one of passed: not the same file once symbolic links are followed (a
// symbolic or hard link) and not a byte-for-byte copy. A front command
// of another build is not recognized here; it is exec'd, and skips this
// one through passedVar. Empty and relative PATH entries are skipped, as
// exec.LookPath refuses what they find: a potato in the current
// directory must not take the verb.
func findPotato(self, path string, passed []string) (string, error) {
	type front struct {
		path string
		st   os.FileInfo
	}
	selfSt, err := os.Stat(self)
	if err != nil {
		return "", fmt.Errorf("cannot find this command's executable: %w", err)
	}
	skip := []front{{self, selfSt}}
	for _, p := range passed {
		if st, err := os.Stat(p); err == nil {
			skip = append(skip, front{p, st})
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			continue
		}
		if slices.ContainsFunc(skip, func(f front) bool {
			return os.SameFile(f.st, st) || f.st.Size() == st.Size() && bundle.SameContent(f.path, p)
		}) {
			continue
		}
		return p, nil
	}
	return "", errNoPotato
}

// selfPath is this command's executable with symbolic links resolved.
func selfPath() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(p)
}

// passedOn is the list of passedVar in env.
func passedOn(env []string) []string {
	for _, kv := range slices.Backward(env) {
		if v, ok := strings.CutPrefix(kv, passedVar+"="); ok {
			return slices.DeleteFunc(filepath.SplitList(v), func(s string) bool { return s == "" })
		}
	}
	return nil
}

// potatoCommand is Potato's potato as findPotato finds it for this
// process, or errNoPotato.
func potatoCommand() (string, error) {
	self, err := selfPath()
	if err != nil {
		return "", fmt.Errorf("cannot find this command's executable: %w", err)
	}
	return findPotato(self, os.Getenv("PATH"), passedOn(os.Environ()))
}

// potatoModule is the Python interpreter beside the front command's
// executable (python3, else python: a virtual environment's bin/) when it
// can import Potato's module potato, which runs as python -m potato; ""
// when there is none. Both the executable as started and as resolved are
// tried, since a virtual environment's bin/ may be reached by a link.
func potatoModule(self string) string {
	dirs := []string{filepath.Dir(self)}
	if p, err := os.Executable(); err == nil && filepath.Dir(p) != dirs[0] {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		for _, py := range []string{"python3", "python"} {
			py = filepath.Join(d, py)
			if st, err := os.Stat(py); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				continue
			}
			probe := exec.Command(py, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('potato') is None or importlib.util.find_spec('potato.__main__') is None)")
			probe.Stdin, probe.Stdout, probe.Stderr = nil, nil, nil
			if probe.Run() == nil {
				return py
			}
		}
	}
	return ""
}

// passOn runs Potato's potato with args in place of this process, so its
// standard input and output, signals and exit status are Potato's own
// (the process id is the same: a signal sent to this command reaches
// Potato). It returns only when there is nothing to run: 127 when there
// is no Potato, as a shell says for a command it does not find, with the
// toolkit's verbs for a mistyped one of them; 126 when it cannot be run.
func passOn(args []string, stderr io.Writer) int {
	env := os.Environ()
	passed := passedOn(env)
	if len(passed) >= maxPassed {
		fmt.Fprintf(stderr, "%s: error: %d potato commands in a row passed verb %q on to each other: %s\n",
			name, len(passed), args[0], strings.Join(passed, ", "))
		return 126
	}
	self, err := selfPath()
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: cannot find this command's executable: %v\n", name, err)
		return 126
	}
	path, err := findPotato(self, os.Getenv("PATH"), passed)
	if err != nil && !errors.Is(err, errNoPotato) {
		fmt.Fprintf(stderr, "%s: error: %v\n", name, err)
		return 126
	}
	argv := append([]string{name}, args...)
	if err != nil {
		// One environment that holds both packages has one bin/potato,
		// ours when potato-training was installed last: Potato is then
		// its Python module, run by the interpreter beside us.
		if py := potatoModule(self); py != "" {
			path, argv, err = py, append([]string{py, "-m", "potato"}, args...), nil
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: error: %q is not a verb of the toolkit, and no other potato command is on PATH to pass it to\n", name, args[0])
		if s := suggest(args[0]); s != "" {
			fmt.Fprintf(stderr, "%s: hint: did you mean %q?\n", name, name+" "+s)
		}
		fmt.Fprintf(stderr, "%s: hint: the toolkit's verbs are %s; see potato --help\n", name, strings.Join(firstWords(), ", "))
		fmt.Fprintf(stderr, "%s: hint: Potato's own verbs, such as potato start, need potato-annotation installed with its potato on PATH\n", name)
		return 127
	}
	env = slices.DeleteFunc(env, func(kv string) bool {
		return strings.HasPrefix(kv, passedVar+"=") || strings.HasPrefix(kv, cli.InvokedAsVar+"=")
	})
	env = append(env, passedVar+"="+strings.Join(append(passed, self), string(os.PathListSeparator)))
	err = syscall.Exec(path, argv, env)
	fmt.Fprintf(stderr, "%s: error: cannot run Potato's %s: %v\n", name, path, err)
	return 126
}

// firstWords are the first words of the toolkit's verbs: validate,
// training, serve.
func firstWords() []string {
	var words []string
	for _, r := range routes {
		if !slices.Contains(words, r.words[0]) {
			words = append(words, r.words[0])
		}
	}
	return words
}

// ours tells whether word is the first word of one of the toolkit's verbs.
func ours(word string) bool { return slices.Contains(firstWords(), word) }

// suggest is the toolkit's first word that word is a slip of (at most
// two letters changed, added or taken out) or the start of (three letters
// or more), or "".
func suggest(word string) string {
	for _, w := range firstWords() {
		if distance(word, w) <= 2 || len(word) >= 3 && strings.HasPrefix(w, word) {
			return w
		}
	}
	return ""
}

// distance is the Levenshtein distance between a and b, by bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
