//go:build race

package engine

// The race detector's instrumentation allocates, so allocation counts are
// only asserted without it.
const raceEnabled = true
