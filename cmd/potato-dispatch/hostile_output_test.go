package main

import (
	"regexp"
	"strings"
	"testing"

	"potato-training/internal/testproject"
)

// controlBytes are what a terminal acts on: C0 but tab and newline, DEL,
// and C1 (U+0080-U+009F, two bytes in UTF-8).
var controlBytes = regexp.MustCompile("[\x00-\x08\x0b-\x1f\x7f]|\u0080|[\u0081-\u009f]|\u202e")

// TestHostileTrainerOutput is a trainer that writes escape sequences (a
// window title, a screen clear, a carriage return over a forged line of
// the dispatch, a C1 CSI, a bidi override) in its log lines, its status,
// its stray output and its error (the failed run's step), and a log line marked as the agent's that
// reads like the dispatch's own. The run log, potato-dispatch status (the
// table and the run's detail) and potato-dispatch run's summary show the
// sequences as text and act on nothing, and the agent's line is marked as
// the agent's.
func TestHostileTrainerOutput(t *testing.T) {
	t.Parallel()
	dir, cfg := testproject.Project(t, 40, 30, "")
	tr := trainerProgram(t, dir, `printf '%s\n' '{"v":1,"event":"status","state":"running","step":"fit \u001b[2J\u001b]0;owned\u0007"}'
printf '%s\n' '{"v":1,"event":"log","level":"info","msg":"epoch 1\r2026-01-01T00:00:00Z run succeeded \u009b31m\u202eevil"}'
printf '%s\n' '{"v":1,"event":"log","level":"info","source":"agent","msg":"the run succeeded; 40 prelabels are in the store"}'
printf 'stray \033[31mred\033[0m output\n'
printf '%s\n' '{"v":1,"event":"error","code":"fit_failed","message":"bad \u001b[5mblink\u001b[0m"}'
exit 1`)
	r := run(t, "run", cfg, "--trainer", tr, "--schemas", "sentiment")
	id := strings.TrimSpace(r.stdout)
	if r.code != 1 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	log := runLog(t, dir, id)
	if m := controlBytes.FindString(log); m != "" {
		t.Errorf("the run log holds %q:\n%s", m, log)
	}
	for _, want := range []string{`epoch 1\x0d2026-01-01T00:00:00Z run succeeded \u009b31m\u202eevil`,
		`agent: the run succeeded; 40 prelabels are in the store`, `stray \x1b[31mred\x1b[0m output`, `bad \x1b[5mblink\x1b[0m`} {
		if !strings.Contains(log, want) {
			t.Errorf("the run log lacks %q:\n%s", want, log)
		}
	}
	if regexp.MustCompile(`(?m)^\S+ the run succeeded`).MatchString(log) {
		t.Errorf("the agent's line passes for the dispatch's:\n%s", log)
	}
	if m := controlBytes.FindString(r.stderr); m != "" {
		t.Errorf("potato-dispatch run's summary holds %q:\n%s", m, r.stderr)
	}
	for _, args := range [][]string{{"status", cfg}, {"status", cfg, id, "--lines", "50"}} {
		s := run(t, args...)
		if s.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, s.code, s.stderr)
		}
		if m := controlBytes.FindString(s.stdout); m != "" {
			t.Errorf("%v holds %q:\n%s", args, m, s.stdout)
		}
		// The step of a failed run is its error.
		if !strings.Contains(s.stdout, `failed: bad \x1b[5mblink\x1b[0m`) {
			t.Errorf("%v does not show the step's escapes as text:\n%s", args, s.stdout)
		}
	}
}
