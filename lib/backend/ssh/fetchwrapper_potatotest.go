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

// testRsync keeps the copies off rsync when POTATO_TRAINING_TEST_NO_RSYNC
// is set, so the tests run the tar stream on a machine that has rsync.
func testRsync() sshx.Rsync {
	if os.Getenv("POTATO_TRAINING_TEST_NO_RSYNC") != "" {
		return sshx.RsyncNever
	}
	return sshx.RsyncAuto
}
