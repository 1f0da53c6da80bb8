//go:build potatotest

package ssh

import "os"

// testToken lets the test that checks the run's token never shows on a
// command line or in a log know the token. Only the test suite's builds
// (go build -tags potatotest) have it.
func testToken() string { return os.Getenv("POTATO_TRAINING_TEST_TOKEN") }
