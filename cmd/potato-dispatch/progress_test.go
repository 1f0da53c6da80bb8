package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"potato-training/internal/testcli"
	"potato-training/internal/testproject"
	"potato-training/lib/events"
	"potato-training/lib/rundir"
)

// longFit is a tfidf-logreg run of 3000 epochs: at one progress and
// three metric events an epoch unthrottled, some 1.4 MB of events,
// whatever the number of items (TestNoProgressOnAPipe fits 300, a second
// or so of fitting).
var longFit = []string{"--trainer", "tfidf-logreg", "--schemas", "sentiment", "--param", "epochs=3000", "--param", "patience=-1"}

func emailProject(t *testing.T, n int) *testproject.Runs {
	dir := t.TempDir()
	return &testproject.Runs{T: t, Bin: testcli.Binaries(t), Dir: dir, Config: testproject.Write(t, dir, n, n, "")}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Run on a real terminal (a pseudo-terminal from script(1)), run shows
// one line rewritten in place with the phase, percent, rate and ETA, and
// erases it before the summary. The trainer reports 20 progress events a
// tenth of a second apart, then the built-in trainer ends the run: two
// seconds of progress at least, whatever the machine's speed.
func TestProgressOnATerminal(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) from util-linux is not installed")
	}
	r := emailProject(t, 1500)
	fit := testproject.NewEndless(t, t.TempDir(), filepath.Join(r.Bin, "potato-agent"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a guard against a hang
	defer cancel()
	argv := []string{filepath.Join(r.Bin, "potato-dispatch"), "run", r.Config}
	argv = append(argv, fit.Args()...)
	argv = append(argv, "--param", "events=20")
	for i, a := range argv {
		argv[i] = shellQuote(a)
	}
	// script runs the command on a new pseudo-terminal and copies what it
	// writes there to standard output; -e passes on its exit status.
	cmd := exec.CommandContext(ctx, "script", "-qefc", strings.Join(argv, " "), "/dev/null")
	cmd.Env = append(os.Environ(), "TERM=xterm")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v\n%q", err, out)
	}
	text := string(out)
	id := regexp.MustCompile(`(?m)^([0-9]{8}T[0-9]{6}-[0-9a-f]{6})\r?$`).FindStringSubmatch(text)
	if id == nil {
		t.Fatalf("no run id in what the terminal showed:\n%q", text)
	}
	line := regexp.MustCompile(`\rpotato-dispatch: [0-9]+:[0-9]{2}  fit  [0-9.]+%  [0-9]+/1000000  [0-9.k]+ it/s  ETA [0-9hms]+\x1b\[K`)
	if n := len(line.FindAllString(text, -1)); n < 2 {
		t.Errorf("%d progress lines rewritten in place, want several:\n%q", n, text)
	}
	if !strings.Contains(text, "\r\x1b[Kpotato-dispatch: run "+id[1]+": success;") {
		t.Errorf("the line is not erased before the summary:\n%q", text)
	}
}

// Without a terminal (a pipe, as for a script or cron) run prints the run
// id on standard output and the summary on standard error, nothing else.
// Its events.jsonl stays small whatever the fit's rate.
func TestNoProgressOnAPipe(t *testing.T) {
	t.Parallel()
	r := emailProject(t, 300)
	code, stdout, stderr := runDispatch(t, r, []string{"TERM=xterm"}, append([]string{"run", r.Config}, longFit...)...)
	id := strings.TrimSpace(stdout)
	if code != 0 || !rundir.ValidID(id) || stdout != id+"\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if !regexp.MustCompile(`^potato-dispatch: run ` + id + `: success; [^\r\x1b]*\n$`).MatchString(stderr) {
		t.Errorf("stderr is not the summary line alone: %q", stderr)
	}

	// The bar of the project's event files: a 3000-epoch tfidf run writes
	// an events.jsonl under 1 MB, and the last progress event, the fit's
	// end, is in it.
	b, err := os.ReadFile(filepath.Join(r.Root().RunDir(id), rundir.EventsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) >= 1<<20 {
		t.Errorf("events.jsonl is %d bytes, want under 1 MB", len(b))
	}
	var last events.Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if e, err := events.Parse(sc.Bytes()); err == nil && e.Kind == events.KindProgress {
			last = e
		}
	}
	if last.Number("current") != 3000 || last.Number("total") != 3000 {
		t.Errorf("the last progress event is %v, want the fit's end, 3000 of 3000", last.Fields)
	}
	t.Logf("events.jsonl: %d bytes", len(b))
}
