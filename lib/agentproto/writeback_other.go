//go:build !linux

package agentproto

import "os"

// startWriteback does nothing here: the fsync writes the file.
func startWriteback(f *os.File, off, n int64) {}
