package main

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"potato-training/internal/testcli"
)

// The scripts run the built binaries ($BIN), since the front command finds
// its siblings beside its own executable.
func TestScripts(t *testing.T) {
	testscript.Run(t, testcli.Params(t, "testdata", true))
}

func TestMain(m *testing.M) { os.Exit(testcli.Main(m)) }
