package testenv

import "runtime"

// HeapInUse returns the bytes of live heap after two collections: what a
// test measures memory with, before and after building what it measures.
func HeapInUse() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
