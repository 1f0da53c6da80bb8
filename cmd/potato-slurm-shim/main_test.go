package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"potato-training/internal/slurmshim"
	"potato-training/internal/testcli"
)

func TestMain(m *testing.M) {
	cmds := map[string]func(){slurmshim.Name: func() { main() }}
	for _, name := range slurmshim.Imitated() {
		cmds[name] = func() { main() }
	}
	testscript.Main(m, cmds)
}

func TestScripts(t *testing.T) {
	p := testcli.Params(t, "testdata", false)
	p.Cmds["poll"] = poll
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		env.Setenv(slurmshim.EnvDir, env.WorkDir+"/shim")
		return setup(env)
	}
	testscript.Run(t, p)
}

// poll is the script command "poll REGEXP PROGRAM [ARGS...]": it runs
// PROGRAM every 100 ms until its standard output matches REGEXP, and
// fails after 60 s. Its last stdout and stderr are kept for the next
// assertions.
func poll(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: poll REGEXP PROGRAM [ARGS...]")
	}
	re, err := regexp.Compile("(?m)" + args[0])
	ts.Check(err)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ts.Exec(args[1], args[2:]...)
		out := ts.ReadFile("stdout")
		if re.MatchString(out) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s never printed a match for %q; last output:\n%s%s", args[1], args[0], out, ts.ReadFile("stderr"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
