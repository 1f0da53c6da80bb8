//go:build potatotest

package ssh

import (
	"os"

	"potato-training/lib/shell"
	"potato-training/lib/sshx"
)

// testFetchWrapper names a remote program that the copy back's command
// runs under, so the test of a stalled copy (F7) can delay the sender.
// Only the test suite's builds (go build -tags potatotest) have it.
func testFetchWrapper() string {
	if w := os.Getenv("POTATO_TRAINING_TEST_FETCH_WRAPPER"); w != "" {
		return shell.Quote(w) + " "
	}
	return ""
}

// testRsync is how the copies use rsync: POTATO_TRAINING_TEST_RSYNC
// "never" or "always" overrides the choice, so the tests run either way on
// a machine that has rsync.
func testRsync() sshx.Rsync {
	switch os.Getenv("POTATO_TRAINING_TEST_RSYNC") {
	case "never":
		return sshx.RsyncNever
	case "always":
		return sshx.RsyncAlways
	}
	return sshx.RsyncAuto
}
