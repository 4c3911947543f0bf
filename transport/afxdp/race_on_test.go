//go:build race

package afxdp

// The race detector's instrumentation allocates, so allocation counts are
// only asserted without it.
const raceEnabled = true
