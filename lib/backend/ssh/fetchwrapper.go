//go:build !potatotest

package ssh

// testFetchWrapper is the seam of the test of a stalled copy back; in a
// normal build there is none.
func testFetchWrapper() string { return "" }
