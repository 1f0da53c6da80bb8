//go:build !linux

package agentproto

import "os"

// datasync writes f to disk; without fdatasync, an fsync.
func datasync(f *os.File) error { return f.Sync() }
