//go:build amd64 && !purego

package transport

// prefetchLines issues PREFETCHT0 for the n cache lines from p on.
//
//go:noescape
func prefetchLines(p *byte, n int)
