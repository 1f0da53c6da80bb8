package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"potato-training/internal/testcli"
)

// TestScripts runs the command-line scripts of testdata/script: what
// potato-dispatch prints on stdout and stderr, and its exit codes, for the
// usage a user types. The runs in them train the built-in tfidf-logreg on
// a copy of examples/reviews, on the local backend.
func TestScripts(t *testing.T) {
	t.Parallel()
	testscript.Run(t, testcli.Params(t, "testdata/script", true))
}
