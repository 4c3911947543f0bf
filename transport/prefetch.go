package transport

import "unsafe"

// Prefetch asks the CPU to bring the cache lines of b into its caches. It
// is a hint: nothing is read into the program, and memory that cannot be
// read is no fault.
//
// A datagram in shared memory was written by another process, often on
// another core, so reading it waits on each of its cache lines in turn.
// The software switch's loop asks for the datagrams of a batch two ahead
// of the one it adds. The lanes do not: on their results it did not pay.
func Prefetch(b []byte) {
	if len(b) > 0 {
		prefetchLines(unsafe.SliceData(b), (len(b)+63)/64)
	}
}
