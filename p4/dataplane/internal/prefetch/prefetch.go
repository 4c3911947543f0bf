// Package prefetch asks the CPU to bring memory into its caches ahead of
// use. The software switch's loop prefetches the next datagrams of a
// batch while it adds one: they were written by workers on other cores,
// and waiting for each of their cache lines in turn is most of an add.
package prefetch

import "unsafe"

// Bytes prefetches the cache lines of b. It is a hint: nothing is read
// into the program, and memory that cannot be read is no fault.
func Bytes(b []byte) {
	if len(b) == 0 {
		return
	}
	lines(unsafe.SliceData(b), (len(b)+63)/64)
}
