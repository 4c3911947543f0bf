//go:build race

package ring

// The race detector records a socket write's read of its buffer after the write's
// release point and a read's store into its buffer before the acquire point, so it
// cannot see that the kernel orders a send from a tensor before a later receive into
// the same elements. Under -race tensors therefore go through the copying path, which
// it can check.
const raceEnabled = true
