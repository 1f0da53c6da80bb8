//go:build !potatotest

package ssh

import "potato-training/lib/sshx"

// testFetchWrapper is the seam of the test of a stalled copy back; in a
// normal build there is none.
func testFetchWrapper() string { return "" }

// testRsync is how the copies use rsync; in a normal build, as
// sshx.RsyncAuto says.
func testRsync() sshx.Rsync { return sshx.RsyncAuto }
