//go:build amd64 && !purego

package prefetch

// lines issues PREFETCHT0 for the n cache lines from p on.
//
//go:noescape
func lines(p *byte, n int)
