package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"potato-training/internal/testcli"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"potato-validate": func() { main() }})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testcli.Params(t, "testdata", false))
}
