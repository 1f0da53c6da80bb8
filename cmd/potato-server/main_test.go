package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"potato-training/internal/testcli"
)

func TestMain(m *testing.M) {
	testscript.Main(testcli.CleanM{M: m}, map[string]func(){"potato-server": main})
}

// The scripts stop at start-up: the server's routes have their tests in
// lib/server.
func TestScripts(t *testing.T) {
	testscript.Run(t, testcli.Params(t, "testdata", false))
}
