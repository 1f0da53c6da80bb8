package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"potato-training/internal/testcli"
	"potato-training/lib/rundir"
)

func TestMain(m *testing.M) {
	testscript.Main(testcli.CleanM{M: m}, map[string]func(){"potato-register": main})
}

var tokenLine = regexp.MustCompile(`(?m)^  ([0-9a-f]{64})$`)

var tokenInFile = regexp.MustCompile(`^([0-9a-f]{64})\n$`)

// The scripts add three commands: "savetoken VAR [FILE]" keeps the token of
// the last command's stdout, or of a token file, in $VAR; "tokenok [!]
// TRAININGDIR BACKEND TOKEN"
// asks the token store whether TOKEN is BACKEND's current token; "perm
// MODE FILE" compares a file's permission bits.
func TestScripts(t *testing.T) {
	p := testcli.Params(t, "testdata", false)
	p.Cmds["savetoken"] = func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) < 1 || len(args) > 2 {
			ts.Fatalf("usage: savetoken VAR [FILE]")
		}
		m := tokenLine.FindStringSubmatch(ts.ReadFile("stdout"))
		if len(args) == 2 {
			m = tokenInFile.FindStringSubmatch(ts.ReadFile(args[1]))
		}
		if m == nil {
			ts.Fatalf("no token in %s", append(args, "stdout")[1])
		}
		ts.Setenv(args[0], m[1])
	}
	p.Cmds["tokenok"] = func(ts *testscript.TestScript, neg bool, args []string) {
		if len(args) != 3 {
			ts.Fatalf("usage: tokenok TRAININGDIR BACKEND TOKEN")
		}
		root := &rundir.Root{Dir: ts.MkAbs(args[0])}
		if ok := root.CheckToken(args[1], args[2]); ok == neg {
			ts.Fatalf("CheckToken(%s, token) = %v", args[1], ok)
		}
	}
	p.Cmds["perm"] = func(ts *testscript.TestScript, neg bool, args []string) {
		if neg || len(args) != 2 {
			ts.Fatalf("usage: perm MODE FILE")
		}
		want, err := strconv.ParseUint(args[0], 8, 32)
		ts.Check(err)
		st, err := os.Stat(ts.MkAbs(args[1]))
		ts.Check(err)
		if got := st.Mode().Perm(); uint64(got) != want {
			ts.Fatalf("%s has mode %#o, want %#o", filepath.Base(args[1]), got, want)
		}
		fmt.Fprintf(ts.Stdout(), "%s: %#o\n", args[1], st.Mode().Perm())
	}
	testscript.Run(t, p)
}
