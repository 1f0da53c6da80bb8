// Package memtest measures what code under test allocates, for the tests
// that hold hostile input to a stated memory bound (docs/reliability.md).
package memtest

import "runtime"

// Allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc,
// after a collection): every allocation counts, freed or not, so a reader
// that buffers a whole hostile input shows even if it drops it at once.
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
