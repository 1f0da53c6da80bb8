package agent_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// A polling agent's log says when it starts polling, then one line when a
// job starts and one when it ends, with the run id and the outcome: a
// failed job (epochs=abc is refused by the trainer) and a good one.
func TestPollingLogLines(t *testing.T) {
	for _, c := range []struct {
		params map[string]string
		end    string
	}{
		{nil, "finished: success"},
		// With --once the reason is the agent's error line, not repeated.
		{map[string]string{"epochs": "abc"}, "finished: failed (exit status 2)"},
	} {
		s := newPollServer(t, c.params)
		addr, _ := s.serve("127.0.0.1:0")
		a := startAgent(t, addr, t.TempDir(), tokenEnv(s), "--once")
		select {
		case <-s.done:
		case <-time.After(90 * time.Second):
			t.Fatalf("no result\n%s", a.stderr)
		}
		a.wait(t)
		var lines []string
		for _, l := range strings.Split(a.stderr.String(), "\n") {
			if strings.HasPrefix(l, "potato-agent: polling ") || strings.HasPrefix(l, "potato-agent: run "+pollRunID+": ") {
				lines = append(lines, l)
			}
		}
		want := []*regexp.Regexp{
			regexp.MustCompile(`^potato-agent: polling for jobs of backend lab on \S+, in /`),
			regexp.MustCompile(`^potato-agent: run ` + pollRunID + `: started: trainer tfidf-logreg, schemas sentiment$`),
			regexp.MustCompile(`^potato-agent: run ` + pollRunID + `: ` + regexp.QuoteMeta(c.end) + `$`),
		}
		if len(lines) != len(want) {
			t.Fatalf("log lines %q, want %d:\n%s", lines, len(want), a.stderr)
		}
		for i, re := range want {
			if !re.MatchString(lines[i]) {
				t.Errorf("line %d %q, want %s", i+1, lines[i], re)
			}
		}
	}
}
