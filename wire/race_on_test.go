//go:build race

package wire

// The race detector's instrumentation allocates, so allocation counts are
// only asserted without it.
const raceEnabled = true
