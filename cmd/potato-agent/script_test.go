package main

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"potato-training/internal/testcli"
)

func TestMain(m *testing.M) { os.Exit(testcli.Main(m)) }

// TestScripts runs the command-line scripts of testdata/script: what
// potato-agent prints on stdout and stderr, and its exit codes, for the
// settings it refuses before any request and for potato-agent worker's
// specs. None reaches a server: the polling agent itself is tested in
// lib/agent against one.
func TestScripts(t *testing.T) {
	testscript.Run(t, testcli.Params(t, "testdata/script", true))
}
